#!/usr/bin/env bash
# Creates .venv (Python >= 3.11) and installs the project with its development tools. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required")'
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev]'
  rm -f .venv/.installed-*
  touch "$stamp"
fi
# Compile the numba loops into their on-disk cache now (about a minute on a fresh checkout, a second
# after): otherwise every node and test process of a fresh checkout compiles them in its first run.
.venv/bin/python -m party.node.warmup
