#!/usr/bin/env bash
# The README's run command: install Coxswain and run the coordinator on its embedded
# default (SQLite under ./coxswain-data, no ZooKeeper or Kafka). Arguments go to
# `coxswain serve`; without an --input (flag, COXSWAIN_INPUT or config file) it serves a
# demo job reading kafka.orders with 8 partitions. The install is skipped when nothing in
# pyproject.toml changed since the last one (deploy/setup.sh), so a restart serves in
# seconds. COXSWAIN_VENV picks another virtual environment than .venv.
#
#   ./deploy/run.sh [--input SYSTEM.STREAM:PARTITIONS]... [--port 8080] [...]
set -euo pipefail
cd "$(dirname "$0")/.."

./deploy/setup.sh
case " $* " in
    *" --input "* | *" --input="* | *" --config "* | *" --config="*) ;;
    *) [ -n "${COXSWAIN_INPUT:-}" ] || set -- --input kafka.orders:8 "$@" ;;
esac
exec "${COXSWAIN_VENV:-.venv}/bin/coxswain" serve "$@"
