"""deploy/grafana/coxswain.json: every query names only metrics a running coordinator
exports (read from its /metrics), and every exported metric family is on a panel."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.service.conftest import StartServer

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "coxswain.json"
SUFFIXES = {"counter": ("", "_total", "_created"), "gauge": ("",),
            "histogram": ("_bucket", "_sum", "_count", "_created")}


def exported(metrics_text: str) -> tuple[set[str], set[str]]:
    """(sample names the families allow, family names) from the # TYPE lines."""
    families = dict(re.findall(r"^# TYPE (coxswain_\w+) (\w+)$", metrics_text, re.M))
    names = {f + s for f, kind in families.items() for s in SUFFIXES.get(kind, ("",))}
    # *_created: the time each series was created (prometheus_client), not worth a panel
    return names, {f for f in families if not f.endswith("_created")}


def test_every_query_names_an_exported_metric(start_server: StartServer) -> None:
    server = start_server("--input", "kafka.orders:2")
    with server.client() as c:
        text = c.get("/metrics").text
    names, families = exported(text)
    dashboard = json.loads(DASHBOARD.read_text())
    used: set[str] = set()
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            for name in re.findall(r"\bcoxswain_\w+", target["expr"]):
                assert name in names, f"{panel['title']}: {name} is not exported"
                used.add(name)
    covered = {f for f in families if any(u.startswith(f) for u in used)}
    assert covered == families, f"families on no panel: {sorted(families - covered)}"
