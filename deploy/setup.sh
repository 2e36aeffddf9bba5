#!/usr/bin/env bash
# Install what Coxswain and its test suite need: Python packages into .venv and, for the
# tests, Debian's PostgreSQL server binaries (started by the tests themselves).
#
#   ./deploy/setup.sh          # runtime only (the embedded default needs nothing else)
#   ./deploy/setup.sh --dev    # + dev tools and the services the tests start
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
"$PYTHON" - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"Coxswain needs Python >= 3.11, this is {sys.version.split()[0]}")
PY

if [ ! -x .venv/bin/python ]; then
    echo "==> creating .venv" >&2
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip

if [ "${1:-}" = "--dev" ]; then
    echo "==> installing coxswain with its dev tools into .venv" >&2
    .venv/bin/python -m pip install --quiet -e '.[dev]'
    # Debian packages of the services the tests start themselves (and wrk for bench/api.py)
    missing=()
    ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
    [ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
    command -v wrk >/dev/null || missing+=(wrk)
    command -v mvn >/dev/null || missing+=(maven)
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "==> installing Debian packages: ${missing[*]}" >&2
        if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
            "${missing[@]}" >/dev/null
    fi
    # the Kafka broker's jars from Maven Central, once (cached under .cache/, git-ignored)
    echo "==> Kafka broker jars (deploy/local/kafka/pom.xml)" >&2
    .venv/bin/python -c "from service.local.kafka import fetch_jars; print(fetch_jars())" >&2
    echo "==> Spark Kafka connector jars (deploy/local/spark/pom.xml)" >&2
    .venv/bin/python -c "from worker.jars import connector_jars; print(connector_jars()[0].parent)" >&2
else
    echo "==> installing coxswain into .venv" >&2
    .venv/bin/python -m pip install --quiet -e .
fi
