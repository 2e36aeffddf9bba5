"""What SASL_SSL costs a worker (#51): the 0-work job of ``bench.peer`` (one worker,
``--api task``, Python reader, output through Spark's Kafka sink) drained from a backlog
on a plaintext broker and on a SASL_SSL-only broker (SCRAM-SHA-512, TLS with a test CA
made by openssl), the two alternated in one run; records/s from the backlog's commit to
the last output record (``bench.peer``'s measure), medians and the ratio.

Run: python -m bench.secured_kafka [--records 50000] [--runs 3] [--master local[2]]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.peer import Measured, _topic, backlog_run, run_coxswain
from service.local.kafka import LocalKafka, SaslSsl
from tests.infra.certs import make_certs


@contextmanager
def brokers(root: Path) -> Iterator[dict[str, LocalKafka]]:
    """A plaintext broker and a SASL_SSL-only one, stopped by pid after."""
    certs = make_certs(root / "certs")
    started: dict[str, LocalKafka] = {}
    try:
        started["plaintext"] = LocalKafka.create().start()
        started["SASL_SSL"] = LocalKafka.create(sasl_ssl=SaslSsl(
            certs.server_pem(), certs.ca, (("broker", "broker-pw"), ("bench", "bench-pw")))
        ).start()
        yield started
    finally:
        for broker in started.values():
            broker.destroy()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=50_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--master", default="local[2]")
    args = p.parse_args()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    rates: dict[str, list[float]] = {"plaintext": [], "SASL_SSL": []}
    with tempfile.TemporaryDirectory() as tmp_name, brokers(Path(tmp_name)) as found:
        tmp = Path(tmp_name)
        for run in range(args.runs):
            for name, kafka in found.items():
                def backlog(out_topic: str, source: str, kafka: LocalKafka = kafka
                            ) -> Measured:
                    return backlog_run(kafka, source, out_topic, "zero", args.records,
                                       args.keys)

                measured, _ = run_coxswain(kafka, _topic(kafka), "zero", args.master, 1,
                                           tmp, [], backlog)
                rates[name].append(measured.rate)
                print(f"  run {run + 1} {name}: {measured.rate:,.0f} rec/s", flush=True)
    print(f"load average at end: {os.getloadavg()}")
    plain = statistics.median(rates["plaintext"])
    secured = statistics.median(rates["SASL_SSL"])
    print(f"\nmedians of {args.runs}, {args.records} records, master {args.master}")
    print("| broker | rec/s | x plaintext |\n|---|---|---|")
    print(f"| plaintext | {plain:,.0f} | 1.00 |")
    print(f"| SASL_SSL (SCRAM-SHA-512) | {secured:,.0f} | {secured / plain:.2f} |")


if __name__ == "__main__":
    main()
