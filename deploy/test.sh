#!/usr/bin/env bash
# The README's test command: install everything the suite needs, then run it all.
#
#   ./deploy/test.sh [pytest args...]
#
# Installs the project and its dev tools into .venv (Python >= 3.11) and the service
# binaries the tests start themselves (PostgreSQL from Debian), checks the code with ruff
# and mypy (beside the tests) and the docs, and runs the whole pytest suite. Exits non-zero when anything fails. Service
# data lives under .cache/ (git-ignored); every process a test starts, it stops.
set -euo pipefail
cd "$(dirname "$0")/.."

./deploy/setup.sh --dev

echo "==> ruff"
.venv/bin/ruff check .
echo "==> docs (mkdocs build --strict: a broken link or anchor fails)"
.venv/bin/mkdocs build --strict --quiet --site-dir .cache/site
# mypy (half a minute of one core) runs beside the suite's first minutes, which leave
# much of the machine idle; its verdict is printed and counted after the tests'
mkdir -p .cache
mypy_log=.cache/mypy.log
echo "==> mypy (beside the tests: its verdict follows theirs; log in $mypy_log)"
.venv/bin/mypy > "$mypy_log" 2>&1 &
mypy_pid=$!
trap 'kill "$mypy_pid" 2>/dev/null || true' EXIT
echo "==> pytest"
tests=0
.venv/bin/pytest "$@" || tests=$?
typed=0
wait "$mypy_pid" || typed=$?
trap - EXIT
echo "==> mypy"
cat "$mypy_log"
if [ "$typed" -ne 0 ]; then
    echo "==> mypy failed (exit $typed)" >&2
fi
if [ "$tests" -ne 0 ]; then
    exit "$tests"
fi
exit "$typed"
