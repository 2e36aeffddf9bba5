"""The exception hierarchy of the pure core; the service maps these to API error codes."""

from __future__ import annotations


class GroupingError(ValueError):
    """Base class: the input to a grouping function is invalid. Nothing was changed."""

    code = "invalid_grouping_input"


class InvalidElasticityFactor(GroupingError):
    """An elasticity factor that is not a power of two within 1..max."""

    code = "invalid_elasticity_factor"


class UnsupportedGrouperConfiguration(GroupingError):
    """A grouper asked to do something it cannot (e.g. AllSspToSingleTask with F > 1)."""

    code = "unsupported_grouper_configuration"


class JobModelFormatError(GroupingError):
    """A job model (or part of one) could not be read from JSON."""

    code = "invalid_job_model"


class InvalidAssignmentParams(GroupingError):
    """Assignment parameters outside their documented ranges."""

    code = "invalid_assignment_params"
