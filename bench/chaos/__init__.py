"""The chaos run (``python -m bench.chaos``): a whole deployment under random faults,
then an independent check; ``run`` is what the test suite's shortened run calls."""

from bench.chaos.config import (
    FAULTS,
    NETWORK_FAULTS,
    STATEFUL_FAULTS,
    ChaosConfig,
    ChaosReport,
)
from bench.chaos.run import run

__all__ = ["FAULTS", "NETWORK_FAULTS", "STATEFUL_FAULTS", "ChaosConfig", "ChaosReport",
           "run"]
