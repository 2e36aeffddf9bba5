#!/usr/bin/env bash
# The README's run command: install Coxswain and run the coordinator on its embedded
# default (SQLite under ./coxswain-data, no ZooKeeper or Kafka). Arguments go to
# `coxswain serve`; without any, it serves a demo job reading kafka.orders with 8 partitions.
#
#   ./deploy/run.sh [--input SYSTEM.STREAM:PARTITIONS]... [--port 8080] [...]
set -euo pipefail
cd "$(dirname "$0")/.."

./deploy/setup.sh
if [ "$#" -eq 0 ]; then
    set -- --input kafka.orders:8
fi
exec .venv/bin/coxswain serve "$@"
