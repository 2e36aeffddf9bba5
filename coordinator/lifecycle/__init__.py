"""The job-model lifecycle, split along its concepts: the coordinator (versions,
generation and publication, barriers), liveness (registrations, heartbeats, closed polls,
lease sweeps), inputs, probing, waiters of long polls and commit fencing."""

from coordinator.lifecycle.config import CoordinatorConfig, LifecycleObserver, RebalanceRecord
from coordinator.lifecycle.coordinator import Coordinator

__all__ = ["Coordinator", "CoordinatorConfig", "LifecycleObserver", "RebalanceRecord"]
