#!/usr/bin/env bash
# The README's test command: install everything the suite needs, then run it all.
#
#   ./deploy/test.sh [pytest args...]
#
# Installs the project and its dev tools into .venv (Python >= 3.11) and the service
# binaries the tests start themselves (PostgreSQL from Debian), checks the code with ruff
# and mypy, and runs the whole pytest suite. Exits non-zero when anything fails. Service
# data lives under .cache/ (git-ignored); every process a test starts, it stops.
set -euo pipefail
cd "$(dirname "$0")/.."

./deploy/setup.sh --dev

echo "==> ruff"
.venv/bin/ruff check .
echo "==> mypy"
.venv/bin/mypy
echo "==> docs (mkdocs build --strict: a broken link or anchor fails)"
.venv/bin/mkdocs build --strict --quiet --site-dir .cache/site
echo "==> pytest"
.venv/bin/pytest "$@"
