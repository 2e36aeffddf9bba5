#!/usr/bin/env bash
# Install what Coxswain and its test suite need: Python packages into a virtual environment
# (.venv, or $COXSWAIN_VENV) and, for the tests, the Debian packages of the services they
# start themselves.
#
#   ./deploy/setup.sh           # the coordinator only (the embedded default needs no more)
#   ./deploy/setup.sh --worker  # + the PySpark worker (coxswain worker, coxswain demo)
#   ./deploy/setup.sh --dev     # + the worker, dev tools and the services the tests start
#
# pip runs only when pyproject.toml, the Python or the install kind changed since the last
# install into that environment (a stamp file in it records them, as a build tool would):
# the install is editable, so source changes need no reinstall and a restart serves in
# seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${COXSWAIN_VENV:-.venv}
"$PYTHON" - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"Coxswain needs Python >= 3.11, this is {sys.version.split()[0]}")
PY

if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating $VENV" >&2
    "$PYTHON" -m venv "$VENV"
fi

# what an install depends on; a dev install also satisfies a runtime one
fingerprint() {
    { cat pyproject.toml; "$VENV/bin/python" -VV; echo "$1"; } | sha256sum | cut -d' ' -f1
}
install() {  # $1: runtime | worker | dev
    local spec=. stamp="$VENV/.coxswain-install-$1"
    [ "$1" = worker ] && spec='.[worker]'
    [ "$1" = dev ] && spec='.[worker,kinesis,dev]'
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(fingerprint "$1")" ]; then
        echo "==> coxswain ($1) in $VENV is up to date with pyproject.toml" >&2
        return
    fi
    echo "==> installing coxswain ($1) into $VENV (pip; skipped next time unless" \
         "pyproject.toml changes)" >&2
    rm -f "$stamp"
    "$VENV/bin/python" -m pip install -qq --disable-pip-version-check --upgrade pip
    # -qq: errors only; setuptools' advisory banner about editable installs of a flat
    # layout (folders named like the packages, which is this project's layout) is noise here
    "$VENV/bin/python" -m pip install -qq --disable-pip-version-check -e "$spec"
    fingerprint "$1" > "$stamp"
}

if [ "${1:-}" = "--dev" ]; then
    install dev
    # Debian packages of the services the tests start themselves (wrk for bench/api.py,
    # chromium for the status page test, podman for the container images)
    missing=()
    ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
    [ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
    command -v wrk >/dev/null || missing+=(wrk)
    command -v mvn >/dev/null || missing+=(maven)
    command -v chromium >/dev/null || missing+=(chromium)  # the status page test
    # the container image test: podman with what it recommends (buildah, fuse-overlayfs,
    # uidmap: the set verified here), mmdebstrap for the Debian base image
    containers=()
    command -v podman >/dev/null || containers+=(podman)
    command -v mmdebstrap >/dev/null || containers+=(mmdebstrap)
    if [ "${#missing[@]}" -gt 0 ] || [ "${#containers[@]}" -gt 0 ]; then
        echo "==> installing Debian packages: ${missing[*]} ${containers[*]}" >&2
        if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
        $SUDO apt-get update -qq
        if [ "${#missing[@]}" -gt 0 ]; then
            DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
                --no-install-recommends "${missing[@]}" >/dev/null
        fi
        if [ "${#containers[@]}" -gt 0 ]; then
            DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
                "${containers[@]}" >/dev/null
        fi
    fi
    # the Kafka broker's jars from Maven Central, once (cached under .cache/, git-ignored)
    echo "==> Kafka broker jars (deploy/local/kafka/pom.xml)" >&2
    "$VENV/bin/python" -c "from service.local.kafka import fetch_jars; print(fetch_jars())" >&2
    echo "==> Spark Kafka connector jars (deploy/local/spark/pom.xml)" >&2
    "$VENV/bin/python" -c \
        "from worker.jars import connector_jars; print(connector_jars()[0].parent)" >&2
    echo "==> local Kinesis API server (kinesalite, npm)" >&2
    "$VENV/bin/python" -c \
        "from service.local.kinesis import install; print(install())" >&2
elif [ -f "$VENV/.coxswain-install-dev" ] \
        && [ "$(cat "$VENV/.coxswain-install-dev")" = "$(fingerprint dev)" ]; then
    # a dev install has everything
    echo "==> coxswain (dev) in $VENV is up to date with pyproject.toml" >&2
elif [ "${1:-}" = "--worker" ]; then
    install worker
elif [ -f "$VENV/.coxswain-install-worker" ] \
        && [ "$(cat "$VENV/.coxswain-install-worker")" = "$(fingerprint worker)" ]; then
    echo "==> coxswain (worker) in $VENV is up to date with pyproject.toml" >&2
else
    install runtime
fi

# the worker JVM's class-data archive, once per Java and PySpark (cached under .cache/jvm):
# every worker's Spark then starts seconds faster. Only for the installs that asked for
# the worker: ./deploy/run.sh (the coordinator) never waits for it
if { [ "${1:-}" = "--dev" ] || [ "${1:-}" = "--worker" ]; } \
        && "$VENV/bin/python" -c "import pyspark" 2>/dev/null; then
    echo "==> the worker JVM's class archive (python -m worker.runtime.make_class_archive)" >&2
    "$VENV/bin/python" -m worker.runtime.make_class_archive >&2 \
        || echo "==> no class archive: workers start without one (slower, not wrong)" >&2
fi
