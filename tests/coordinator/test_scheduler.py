"""Named timers: a trailing-edge debounce, cancellation, serial actions."""

from __future__ import annotations

import asyncio

from coordinator.scheduler import Scheduler


def test_rescheduling_a_name_debounces_to_the_last_trigger() -> None:
    async def scenario() -> list[str]:
        fired: list[str] = []
        s = Scheduler()
        # each trigger comes well within the one before's delay (a loaded machine's
        # 10 ms sleeps overran a 50 ms delay): only the last one runs
        for i in range(5):
            async def act(i: int = i) -> None:
                fired.append(f"run{i}")
            s.schedule("rebalance", 1.0, act)
            await asyncio.sleep(0)
        for _ in range(300):
            if fired:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # (a second run would come at once after the first)
        await s.close()
        return fired

    assert asyncio.run(scenario()) == ["run4"]


def test_cancel_and_failures_do_not_stop_the_scheduler() -> None:
    async def scenario() -> list[str]:
        fired: list[str] = []
        s = Scheduler()

        async def boom() -> None:
            raise RuntimeError("boom")

        async def ok() -> None:
            fired.append("ok")

        async def never() -> None:
            fired.append("never")

        s.schedule("a", 0.01, boom)
        s.schedule("b", 0.02, ok)
        s.schedule("c", 0.02, never)
        assert s.is_scheduled("c")
        s.cancel("c")
        await asyncio.sleep(0.1)
        await s.close()
        s.schedule("d", 0, never)  # closed: ignored
        await asyncio.sleep(0.02)
        return fired

    assert asyncio.run(scenario()) == ["ok"]
