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

# Steps that need nothing from each other run side by side, each in its own process group
# with its output kept until it ends (then shown, with its time): the PySpark wheel's build
# beside pip's other packages, the Maven downloads beside npm's. The first failed step
# fails the setup; a stopped setup stops them all.
CACHE=${COXSWAIN_CACHE_DIR:-.cache}  # where service.local and worker.jvm.jars keep theirs too
STEPS=$CACHE/setup
mkdir -p "$STEPS"
step_pids=() step_names=() step_if_failed=()
stop_steps() {
    local pid
    for pid in "${step_pids[@]}"; do
        kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
    done
}
trap stop_steps EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
start_step() {  # $1: name, $2: what its failure means ("" fails the setup), the rest: the command
    local name=$1 if_failed=$2
    shift 2
    echo "==> $name (started)" >&2
    # setsid: a group of its own (a pip build, Maven's JVM), stopped as one
    setsid -w bash -c 'started=$SECONDS; "$@"; status=$?
                       echo "($((SECONDS - started)) s)"; exit $status' step "$@" \
        > "$STEPS/${#step_pids[@]}.log" 2>&1 &
    step_pids+=("$!") step_names+=("$name") step_if_failed+=("$if_failed")
}
finish_steps() {  # waits for every step; fails the setup if a needed one failed
    local i status failed=0
    for i in "${!step_pids[@]}"; do
        status=0
        wait "${step_pids[$i]}" || status=$?
        if [ "$status" -eq 0 ]; then
            echo "==> ${step_names[$i]}: done" >&2
        elif [ -n "${step_if_failed[$i]}" ]; then
            echo "==> ${step_names[$i]}: failed (exit $status): ${step_if_failed[$i]}" >&2
        else
            echo "==> ${step_names[$i]}: FAILED (exit $status)" >&2
            failed=1
        fi
        cat "$STEPS/$i.log" >&2
    done
    step_pids=() step_names=() step_if_failed=()
    if [ "$failed" -ne 0 ]; then
        echo "==> setup failed" >&2
        exit 1
    fi
}

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
    local pin=
    [ "$1" != runtime ] && pin=$(pyspark_pin)
    if [ -n "$pin" ]; then
        # PySpark is a 450 MB source distribution whose wheel takes about half a minute to
        # download and build, on one core: it is built beside the install of the other
        # packages, then installed with the worker's (kept under the cache: the next
        # install of the same version finds it)
        local wheels=$CACHE/wheels rest=.
        [ "$1" = dev ] && rest='.[kinesis,dev]'
        mkdir -p "$wheels"
        if ! ls "$wheels/pyspark-${pin#pyspark==}-"*.whl >/dev/null 2>&1; then
            # built in a folder of its own, then moved: a stopped build leaves no torn wheel
            start_step "PySpark's wheel ($pin, beside the other packages)" "" bash -c '
                building=$(mktemp -d "$2/.building-XXXXXX")
                trap "rm -rf \"$building\"" EXIT
                "$0" -m pip wheel -qq --disable-pip-version-check --no-deps "$1" \
                    -w "$building" && mv "$building"/pyspark-*.whl "$2/"' \
                "$VENV/bin/python" "$pin" "$wheels"
        fi
        "$VENV/bin/python" -m pip install -qq --disable-pip-version-check -e "$rest"
        finish_steps
        "$VENV/bin/python" -m pip install -qq --disable-pip-version-check \
            --find-links "$wheels" -e "$spec"
    else
        "$VENV/bin/python" -m pip install -qq --disable-pip-version-check -e "$spec"
    fi
    fingerprint "$1" > "$stamp"
}
pyspark_pin() {  # the worker extra's exact PySpark requirement (pyspark==X.Y.Z), if any
    "$VENV/bin/python" - <<'PY'
import tomllib

with open("pyproject.toml", "rb") as f:
    worker = tomllib.load(f)["project"].get("optional-dependencies", {}).get("worker", [])
pins = [r.split(";")[0].replace(" ", "") for r in worker]
print(next((p for p in pins if p.startswith("pyspark==")), ""))
PY
}

if [ "${1:-}" = "--dev" ]; then
    install dev
    # Debian packages of the services the tests start themselves (wrk for bench/api.py,
    # chromium for the status page test, stress-ng for the CPU hogs of a test on a starved
    # machine, podman for the container images)
    missing=()
    ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
    [ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
    command -v wrk >/dev/null || missing+=(wrk)
    command -v mvn >/dev/null || missing+=(maven)
    command -v chromium >/dev/null || missing+=(chromium)  # the status page test
    command -v stress-ng >/dev/null || missing+=(stress-ng)  # a rescale beside CPU hogs
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

if [ "${1:-}" = "--dev" ]; then
    # the Kafka broker's and the Spark Kafka connector's jars from Maven Central, once
    # (cached under .cache/, git-ignored): one step, as both share Maven's local repository;
    # kinesalite from npm beside it
    start_step "Kafka broker jars and Spark Kafka connector jars (deploy/local/*/pom.xml)" \
        "" "$VENV/bin/python" -c "
from service.local.kafka import fetch_jars
from worker.jvm.jars import connector_jars
print(fetch_jars())
print(connector_jars()[0].parent)"
    start_step "local Kinesis API server (kinesalite, npm)" \
        "" "$VENV/bin/python" -c "from service.local.kinesis import install; print(install())"
    finish_steps
fi

# the worker JVM's class-data archive, once per Java and PySpark (cached under .cache/jvm):
# every worker's Spark then starts seconds faster. Only for the installs that asked for
# the worker: ./deploy/run.sh (the coordinator) never waits for it. After the jars: the
# worker's Spark session it records loads the connector's, which a dev install has fetched
# by now (and which two processes must not fetch at once: both would write them)
if { [ "${1:-}" = "--dev" ] || [ "${1:-}" = "--worker" ]; } \
        && "$VENV/bin/python" -c "import pyspark" 2>/dev/null; then
    echo "==> the worker JVM's class archive (python -m worker.jvm.make_class_archive)" >&2
    "$VENV/bin/python" -m worker.jvm.make_class_archive >&2 \
        || echo "==> no class archive: workers start without one (slower, not wrong)" >&2
fi
