"""The exception hierarchy of the coordinator; the API maps each ``code`` to an HTTP status."""

from __future__ import annotations


class CoordinatorError(Exception):
    """Base class: a coordinator operation was refused. Nothing was changed."""

    code = "coordinator_error"


class UnknownProcessor(CoordinatorError):
    """The processor is not registered, or its lease expired."""

    code = "unknown_processor"


class ProcessorConflict(CoordinatorError):
    """A live processor with that id is registered at another location."""

    code = "processor_conflict"


class UnknownJobModelVersion(CoordinatorError):
    """No job model has that version."""

    code = "unknown_job_model_version"


class NotAParticipant(CoordinatorError):
    """The processor is not part of that job model version."""

    code = "not_a_participant"


class Fenced(CoordinatorError):
    """A stale leader, worker or version tried to act: refused (fencing)."""

    code = "fenced"


class NotLeader(CoordinatorError):
    """This replica is not the leader and cannot perform the operation."""

    code = "not_leader"


class StoreUnavailable(CoordinatorError):
    """The metadata or checkpoint store cannot be reached."""

    code = "store_unavailable"


class LeaseContended(CoordinatorError):
    """A lease could not be renewed because its record kept changing under concurrent
    writes (or this replica's writes are refused): retry, the processor is not gone."""

    code = "lease_contended"


class LeaseTokenRequired(CoordinatorError):
    """A processor's call came without the lease token of its registration."""

    code = "lease_token_required"
