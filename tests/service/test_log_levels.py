"""``--log-level``: a root level, then per-logger overrides (``service.logs``); a typo is
refused rather than silently logging nothing."""

from __future__ import annotations

import logging

import pytest

from service.logs import configure, parse_levels


def test_a_root_level_then_overrides_per_logger() -> None:
    assert parse_levels("info") == ("INFO", {})
    assert parse_levels("WARNING, coxswain.worker.batches=debug,coxswain.leader=INFO") == (
        "WARNING", {"coxswain.worker.batches": "DEBUG", "coxswain.leader": "INFO"})


@pytest.mark.parametrize("spec", ["LOUD", "INFO,coxswain.worker", "INFO,=DEBUG",
                                  "INFO,coxswain.worker=CHATTY"])
def test_a_malformed_level_is_refused_with_what_is_wrong(spec: str) -> None:
    with pytest.raises(ValueError, match="log level"):
        parse_levels(spec)


def test_configure_applies_the_overrides() -> None:
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    try:
        configure(False, "WARNING,coxswain.test.trace=DEBUG")
        assert root.level == logging.WARNING
        assert logging.getLogger("coxswain.test.trace").isEnabledFor(logging.DEBUG)
        assert not logging.getLogger("coxswain.test.other").isEnabledFor(logging.INFO)
    finally:
        root.setLevel(saved[0])
        root.handlers[:] = saved[1]
        logging.getLogger("coxswain.test.trace").setLevel(logging.NOTSET)
