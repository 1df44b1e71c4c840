#!/usr/bin/env bash
# Run the pprl.v1 live conformance suite (tests/conformance) against a deployment.
#
#   scripts/conformance.sh                         # start a local deployment (real processes) and check it
#   scripts/conformance.sh HOST:PORT --ca CA.pem --cert OPERATOR.pem --key OPERATOR.key \
#       [--coordinator-name NAME] [--probe-cert P.pem --probe-key P.key --probe-host IP] \
#       [--other-cert X.pem --other-key X.key] [--parameters parameters.json] [--expect-matches N] \
#       [--secret-hex HEX] \
#       [any pytest option, e.g. -k identity -x]
#
# Exit status is pytest's: 0 when every check passed (checks lacking the material they need are
# reported as skipped with the reason). docs/protocol.md ("Conformance") explains each check.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
args=()
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then
  args+=(--coordinator "$1")
  shift
fi
exec "$PY" -m pytest tests/conformance -p no:cacheprovider -ra "${args[@]}" "$@"
