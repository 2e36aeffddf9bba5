"""The exception hierarchy of the checkpoint package."""

from __future__ import annotations


class CheckpointError(ValueError):
    """Base class: a checkpoint operation was refused. Nothing was changed."""

    code = "invalid_checkpoint"


class CheckpointFormatError(CheckpointError):
    """A checkpoint (or an offset in one) could not be read."""

    code = "invalid_checkpoint"
