#!/usr/bin/env bash
# The one check run by developers and CI: set up, lint, format check, types, then the whole test suite.
# Extra arguments go to pytest (e.g. `bash scripts/check.sh -x tests/unit`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff (lint)";   ruff check .
echo "== ruff (format)"; ruff format --check .
echo "== mypy";          mypy party coordinator tests
echo "== pytest";        pytest "$@"
