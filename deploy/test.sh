#!/usr/bin/env bash
# The README's test command: install everything the suite needs, then run it all.
#
#   ./deploy/test.sh [pytest args...]
#
# Installs the project and its dev tools into .venv (Python >= 3.11), checks the code with
# ruff and mypy, and runs the whole pytest suite. Exits non-zero when anything fails.
# Services (ZooKeeper, Kafka, PostgreSQL) are started by the tests that need them as they
# arrive; downloads are cached under .cache/ (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
"$PYTHON" - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"Coxswain needs Python >= 3.11, this is {sys.version.split()[0]}")
PY

if [ ! -x .venv/bin/python ]; then
    echo "==> creating .venv"
    "$PYTHON" -m venv .venv
fi
echo "==> installing coxswain with its dev tools into .venv"
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[dev]'

echo "==> ruff"
.venv/bin/ruff check .
echo "==> mypy"
.venv/bin/mypy
echo "==> pytest"
.venv/bin/pytest "$@"
