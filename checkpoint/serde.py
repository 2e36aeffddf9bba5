"""JSON serde of checkpoints: the API.md form, reading both versions, and Samza's forms.

API form (written)::

    {"version": 2, "checkpointId": "1614147487244-33577",
     "inputOffsets": [{"ssp": {"system", "stream", "partition", "keyBucket"}, "offset": "42"}],
     "stateCheckpointMarkers": {"<backend factory>": {"<store>": "<marker>"}}}

Version 1 has only ``inputOffsets``. Readers also accept Samza's CheckpointV1 JSON (an object
keyed by ``SystemStreamPartition [s, st, p]`` whose values hold system, stream, partition and
offset as strings) and CheckpointV2 JSON (``checkpoint-id``, ``input-offsets`` keyed by
``system.stream.partition``, ``state-checkpoint-markers``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from checkpoint.errors import CheckpointFormatError
from checkpoint.model import (
    Checkpoint,
    CheckpointId,
    CheckpointV1,
    CheckpointV2,
    SkipWatermark,
    StartOffset,
)
from grouping.errors import JobModelFormatError
from grouping.model import SystemStreamPartition
from grouping.serde import ssp_from_json, ssp_to_json

JsonObject = dict[str, Any]


def offset_to_json(offset: StartOffset) -> str:
    """Offsets travel as strings: decimal integers, or ``earliest`` / ``latest``."""
    return str(offset) if isinstance(offset, int) else offset.value


def input_offsets_to_json(offsets: Mapping[SystemStreamPartition, str]) -> list[JsonObject]:
    """``[{"ssp": {...}, "offset": "..."}]`` in SSP order."""
    return [{"ssp": ssp_to_json(s), "offset": o} for s, o in sorted(offsets.items())]


def input_offsets_from_json(data: Any) -> dict[SystemStreamPartition, str]:
    """Read ``[{"ssp": {...}, "offset": "..."}]``; duplicate SSPs are refused."""
    if not isinstance(data, list):
        raise CheckpointFormatError("inputOffsets: expected a list")
    out: dict[SystemStreamPartition, str] = {}
    for i, item in enumerate(data):
        where = f"inputOffsets[{i}]"
        if not isinstance(item, Mapping) or "ssp" not in item or "offset" not in item:
            raise CheckpointFormatError(f"{where}: expected {{'ssp': ..., 'offset': ...}}")
        try:
            ssp = ssp_from_json(item["ssp"], f"{where}.ssp")
        except JobModelFormatError as e:
            raise CheckpointFormatError(str(e)) from e
        offset = item["offset"]
        if not isinstance(offset, str):
            raise CheckpointFormatError(f"{where}.offset: offsets are strings, got {offset!r}")
        if ssp in out:
            raise CheckpointFormatError(f"{where}: duplicate SSP {ssp}")
        out[ssp] = offset
    return out


def skip_watermarks_to_json(skips: tuple[SkipWatermark, ...]) -> list[JsonObject]:
    """API.md's ``skipBelow`` list."""
    return [
        {"ssp": {"system": w.ssp.system, "stream": w.ssp.stream, "partition": w.ssp.partition},
         "elasticityFactor": w.factor, "keyBucket": w.bucket,
         "offset": offset_to_json(w.offset)}
        for w in skips
    ]


def _markers(data: Any, where: str) -> dict[str, dict[str, str]]:
    if not isinstance(data, Mapping):
        raise CheckpointFormatError(f"{where}: expected an object of objects")
    out: dict[str, dict[str, str]] = {}
    for backend, stores in data.items():
        if not isinstance(stores, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in stores.items()
        ):
            raise CheckpointFormatError(f"{where}[{backend!r}]: expected store -> marker strings")
        out[str(backend)] = dict(stores)
    return out


def checkpoint_to_json(checkpoint: Checkpoint) -> JsonObject:
    """The API.md form of a v1 or v2 checkpoint."""
    out: JsonObject = {"version": checkpoint.version}
    if isinstance(checkpoint, CheckpointV2):
        out["checkpointId"] = str(checkpoint.checkpoint_id)
    out["inputOffsets"] = input_offsets_to_json(checkpoint.input_offsets)
    if isinstance(checkpoint, CheckpointV2):
        out["stateCheckpointMarkers"] = {
            b: dict(s) for b, s in checkpoint.state_checkpoint_markers.items()
        }
    return out


def checkpoint_from_json(data: Any) -> Checkpoint:
    """Read a checkpoint: API form (v1 or v2) or Samza's v1/v2 JSON."""
    if not isinstance(data, Mapping):
        raise CheckpointFormatError("checkpoint: expected a JSON object")
    if "checkpoint-id" in data or "input-offsets" in data:
        return _samza_v2(data)
    if data and all(str(k).startswith("SystemStreamPartition [") for k in data):
        return _samza_v1(data)
    version = data.get("version", 2 if "checkpointId" in data else 1)
    if version not in (1, 2):
        raise CheckpointFormatError(f"checkpoint.version: expected 1 or 2, got {version!r}")
    offsets = input_offsets_from_json(data.get("inputOffsets", []))
    if version == 1:
        return CheckpointV1.of(offsets)
    if "checkpointId" not in data:
        raise CheckpointFormatError("checkpoint: version 2 needs a checkpointId")
    return CheckpointV2.of(
        CheckpointId.parse(data["checkpointId"]),
        offsets,
        _markers(data.get("stateCheckpointMarkers", {}), "stateCheckpointMarkers"),
    )


def _samza_v1(data: Mapping[str, Any]) -> CheckpointV1:
    offsets: dict[SystemStreamPartition, str] = {}
    for name, entry in data.items():
        if not isinstance(entry, Mapping):
            raise CheckpointFormatError(f"{name}: expected an object")
        try:
            ssp = ssp_from_json(entry, name)
        except JobModelFormatError as e:
            raise CheckpointFormatError(str(e)) from e
        offset = entry.get("offset")
        if offset is not None:  # changelog SSPs may carry no offset
            offsets[ssp] = str(offset)
    return CheckpointV1.of(offsets)


def _samza_v2(data: Mapping[str, Any]) -> CheckpointV2:
    raw_offsets = data.get("input-offsets", {})
    if not isinstance(raw_offsets, Mapping):
        raise CheckpointFormatError("input-offsets: expected an object")
    offsets: dict[SystemStreamPartition, str] = {}
    for key, offset in raw_offsets.items():
        parts = str(key).split(".")
        if len(parts) < 3 or not parts[2].isdigit():
            raise CheckpointFormatError(
                f"input-offsets: key {key!r} is not 'system.stream.partition'")
        bucket = int(parts[3]) if len(parts) > 3 and parts[3].isdigit() else -1
        offsets[SystemStreamPartition(parts[0], parts[1], int(parts[2]), bucket)] = str(offset)
    return CheckpointV2.of(
        CheckpointId.parse(data.get("checkpoint-id", "")),
        offsets,
        _markers(data.get("state-checkpoint-markers", {}), "state-checkpoint-markers"),
    )
