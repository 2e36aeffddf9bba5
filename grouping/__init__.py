"""Pure assignment core of Coxswain: job model types, SSP groupers with elasticity,
task -> processor assignment (host affinity + lag aware), balance and movement measures.

Nothing in this package does I/O or reads a clock; every function maps data to data.
"""

from grouping.errors import (
    GroupingError,
    InvalidAssignmentParams,
    InvalidElasticityFactor,
    JobModelFormatError,
    UnsupportedGrouperConfiguration,
)
from grouping.model import (
    SSP,
    ContainerModel,
    JobModel,
    SystemStreamPartition,
    TaskMode,
    TaskModel,
)

__all__ = [
    "SSP",
    "ContainerModel",
    "GroupingError",
    "InvalidAssignmentParams",
    "InvalidElasticityFactor",
    "JobModel",
    "JobModelFormatError",
    "SystemStreamPartition",
    "TaskMode",
    "TaskModel",
    "UnsupportedGrouperConfiguration",
]
