"""The status page in a real headless browser (Debian's chromium): a running coordinator
with processors, a scale change and a commit; the page's DOM shows them, and a
screenshot is saved under the test's output folder."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests.service.conftest import StartServer
from tests.service.workers import SimWorker, ack_all, offsets_for, settle

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars"]


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"chromium-{len(list(tmp_path.glob('chromium-*')))}"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_status_page_shows_the_job_in_a_browser(start_server: StartServer,
                                                     tmp_path: Path) -> None:
    server = start_server("--input", "kafka.orders:2", "--debounce-ms", "50",
                          "--worker-token", "w" * 24, "--admin-token", "a" * 24,
                          data_dir=tmp_path / "coordinator")
    worker_auth = {"Authorization": "Bearer " + "w" * 24}
    with server.client() as c:
        c.headers.update(worker_auth)
        workers = [SimWorker(c, "worker-a", "rack-1"), SimWorker(c, "worker-b", "rack-2")]
        for w in workers:
            assert w.register().status_code == 201
        model = settle(c, workers)
        while len(model["containers"]) < 2:
            model = settle(c, workers, model["version"])
        r = c.post("/scale", json={"elasticityFactor": 2},
                   headers={"Authorization": "Bearer " + "a" * 24})
        assert r.status_code == 202
        scaled = c.get("/jobmodel").json()
        ack_all(workers, scaled["version"])
        for w in workers:
            tasks = w.tasks(scaled)
            assert w.commit(scaled["version"], {n: offsets_for(t, 1234)
                                                for n, t in tasks.items()}).status_code == 200
            assert c.post(f"/processors/{w.processor_id}/heartbeat", headers=w.lease,
                          json={"stats": {"recordsPerSecond": 321.0, "busy": 0.5,
                                          "version": scaled["version"]}}).status_code == 200
        version = scaled["version"]

    dom = chromium(tmp_path, "--virtual-time-budget=3000", "--dump-dom", server.url + "/")
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert 'data-processor="worker-a"' in html and 'data-processor="worker-b"' in html
    assert "rack-1" in html and "rack-2" in html
    assert f'id="latest-version">{version}<' in html
    assert 'id="factor">2<' in html and 'id="barrier" class="ok">done<' in html
    assert ">scale<" in html  # the rebalance history names the reason
    assert "1,234" in html  # checkpoint progress of the partitions
    assert "w" * 24 not in html and "a" * 24 not in html  # no secrets
    # every card and column says what it means on hover (#50)
    cards = re.findall(r'<div class="card"( title="[^"]+")?>', html)
    headers = re.findall(r"<th( title=\"[^\"]+\")?>", html)
    assert cards and headers
    assert all(cards) and all(headers), (cards, headers)
    shot = tmp_path / "status-page.png"
    done = chromium(tmp_path, "--window-size=1280,1000", f"--screenshot={shot}",
                    server.url + "/")
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.exists() and shot.stat().st_size > 10_000
