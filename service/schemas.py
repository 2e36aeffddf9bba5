"""Request and response schemas of the REST API (API.md): camelCase on the wire.

Requests refuse unknown fields (a typo must not silently do nothing); responses may grow.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, NotRequired

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictInt,
    TypeAdapter,
    model_validator,
    with_config,
)
from pydantic.alias_generators import to_camel
from typing_extensions import TypedDict

from checkpoint.model import MAX_OFFSET_DIGITS
from grouping.model import SystemStreamPartition

MAX_ID = 255


class Request(BaseModel):
    """Base of request bodies: camelCase, unknown fields refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True,
                              extra="forbid", str_strip_whitespace=True)


class Response(BaseModel):
    """Base of response bodies: camelCase."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class ErrorBody(Response):
    """Every error: a machine code and a sentence."""

    error: str
    detail: str


class SspBody(Request):
    """An SSP; ``keyBucket`` -1 or absent = the whole partition."""

    system: str = Field(min_length=1, max_length=MAX_ID)
    stream: str = Field(min_length=1, max_length=MAX_ID)
    partition: StrictInt = Field(ge=0)
    key_bucket: StrictInt = Field(-1, ge=-1)

    def to_ssp(self) -> SystemStreamPartition:
        """The domain SSP."""
        return SystemStreamPartition(self.system, self.stream, self.partition, self.key_bucket)


class RegisterRequest(Request):
    """``POST /processors``."""

    processor_id: str | None = Field(None, min_length=1, max_length=MAX_ID,
                                     pattern=r"^[A-Za-z0-9._:@\-]+$")
    location_id: str = Field(min_length=1, max_length=MAX_ID)
    host: str | None = Field(None, max_length=MAX_ID)
    # the key-hash functions the worker computes buckets with; absent: a worker from
    # before per-job key hashes, which knows crc32 only
    key_hashes: list[str] | None = Field(None, max_length=16)


class RegisterResponse(Response):
    """A registration's lease terms and the version to fetch."""

    processor_id: str
    lease_token: str
    lease_ttl_ms: int
    heartbeat_interval_ms: int
    job_model_version: int | None


MAX_LAG = 2**63 - 1  # lags are offsets: int64, like Kafka's
MAX_TASK_NAME = 512
MAX_STATS_BYTES = 64 * 1024
MAX_STATS_DEPTH = 6
MAX_WARNINGS = 10  # reasons a heartbeat answers with


class HeartbeatRequest(Request):
    """``POST /processors/{id}/heartbeat``: state lag per task, autosizer stats.

    Bounded at the edge, field by field: one bad value must not cost a processor its
    lease (a lease lost moves every task), so a heartbeat whose processor and token are
    right always renews it, and what is out of bounds is left out with a reason
    (:attr:`warnings`, answered and logged). Lags are int64 offsets: one above 2^63-1
    counts as 2^63-1 (very far behind), a negative or non-integer one, or one of a task
    name over 512 characters, is dropped (unknown: not caught up); lags of tasks the
    latest job model does not have are dropped by the coordinator. ``stats`` at most
    64 KiB of JSON nested at most 6 deep, with finite numbers (it is stored with the
    lease and served by ``/status``), or it is dropped whole (the last good stats
    stand)."""

    task_lags: dict[str, Any] | None = None
    stats: dict[str, Any] | None = None
    _warnings: list[str] = PrivateAttr(default_factory=list)

    @property
    def warnings(self) -> list[str]:
        """What was left out or clamped, and why (at most ``MAX_WARNINGS``)."""
        return self._warnings

    @model_validator(mode="after")
    def _bounded(self) -> HeartbeatRequest:
        warnings: list[str] = []
        if self.task_lags is not None:
            kept: dict[str, int] = {}
            for task, lag in self.task_lags.items():
                name = repr(task[:60])
                if len(task) > MAX_TASK_NAME:
                    warnings.append(f"lag of task {name}...: names are at most "
                                    f"{MAX_TASK_NAME} characters; dropped")
                elif isinstance(lag, bool) or not isinstance(lag, int) or lag < 0:
                    warnings.append(f"lag of task {name} must be an integer within "
                                    f"0..2^63-1, got {str(lag)[:40]}; dropped")
                elif lag > MAX_LAG:
                    warnings.append(f"lag of task {name} above 2^63-1 "
                                    f"({str(lag)[:40]}...); counted as 2^63-1")
                    kept[task] = MAX_LAG
                else:
                    kept[task] = lag
            self.task_lags = kept
        if self.stats is not None:
            try:
                _check_stats(self.stats, 1)
                size = len(json.dumps(self.stats, separators=(",", ":")))
                if size > MAX_STATS_BYTES:
                    raise ValueError(f"stats must be at most {MAX_STATS_BYTES} bytes of "
                                     f"JSON, got {size}")
            except (ValueError, RecursionError) as e:
                warnings.append(f"{e}; stats dropped")
                self.stats = None
        self._warnings = warnings[:MAX_WARNINGS]
        return self


def _check_stats(value: Any, depth: int) -> None:
    if isinstance(value, dict | list):
        if depth > MAX_STATS_DEPTH:
            raise ValueError(f"stats may be nested at most {MAX_STATS_DEPTH} deep")
        for item in (value.values() if isinstance(value, dict) else value):
            _check_stats(item, depth + 1)
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueError("stats numbers must be finite")
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_LAG:
        raise ValueError("stats integers must fit in 64 bits")


class VersionResponse(Response):
    """The latest job model version (None before the first)."""

    job_model_version: int | None


class HeartbeatResponse(VersionResponse):
    """A heartbeat's answer: the latest version, and what of the heartbeat was left out
    or clamped, and why (absent when nothing was)."""

    warnings: list[str] | None = None


class ProcessorView(Response):
    """``GET /processors`` item."""

    processor_id: str
    location_id: str
    host: str | None
    lease_expires_at: float
    tasks: list[str]


class AckRequest(Request):
    """``POST /jobmodel/{version}/ack``."""

    processor_id: str = Field(min_length=1, max_length=MAX_ID)


class BarrierResponse(Response):
    """The barrier state after an ack."""

    barrier: str


# POST /checkpoints is the hottest write (a thousand key buckets per request, many
# requests a second): its body is validated straight from bytes into TypedDicts, about
# three times faster than json.loads plus nested BaseModels, with the same rules. Their
# keys are the camelCase wire names.
_WIRE = ConfigDict(extra="forbid", str_strip_whitespace=True)
Id = Annotated[str, Field(min_length=1, max_length=MAX_ID)]


@with_config(_WIRE)
class SspJson(TypedDict):
    """An SSP on the wire; ``keyBucket`` -1 or absent = the whole partition."""

    system: Id
    stream: Id
    partition: Annotated[StrictInt, Field(ge=0)]
    keyBucket: NotRequired[Annotated[StrictInt, Field(ge=-1)]]


@with_config(_WIRE)
class OffsetEntry(TypedDict):
    """One SSP(Kb) and the next offset to read (a decimal string)."""

    ssp: SspJson
    offset: Annotated[str, Field(min_length=1, max_length=MAX_OFFSET_DIGITS)]


@with_config(_WIRE)
class TaskCheckpointBody(TypedDict):
    """One task's checkpoint in a commit."""

    inputOffsets: Annotated[list[OffsetEntry], Field(min_length=1)]
    checkpointId: NotRequired[Annotated[str | None, Field(max_length=64)]]
    stateCheckpointMarkers: NotRequired[dict[str, dict[str, str]] | None]


@with_config(_WIRE)
class CommitRequest(TypedDict):
    """``POST /checkpoints``."""

    processorId: Id
    jobModelVersion: Annotated[StrictInt, Field(ge=1)]
    checkpoints: Annotated[dict[str, TaskCheckpointBody], Field(min_length=1)]


COMMIT_REQUEST = TypeAdapter(CommitRequest)


def inline_schema(adapter: TypeAdapter[Any]) -> dict[str, Any]:
    """``adapter``'s JSON schema with its ``$defs`` inlined, for a route's
    ``openapi_extra`` (OpenAPI resolves ``$ref`` from the document root, not the schema)."""
    schema = adapter.json_schema()
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    return dict(resolve(schema))


class CommitResponse(Response):
    """How many bucket entries a commit wrote and how many moved forward; the tasks whose
    checkpoint id and state markers were not written because a newer checkpoint of theirs
    is stored (a late commit)."""

    committed: int
    advanced: int
    stale_tasks: list[str] = Field(default_factory=list)


class ResetRequest(Request):
    """``POST /checkpoints/reset`` (admin)."""

    ssp: SspBody
    offset: str = Field(min_length=1, max_length=MAX_OFFSET_DIGITS)


class ScaleRequest(Request):
    """``POST /scale``."""

    elasticity_factor: StrictInt


class ScaleView(Response):
    """``GET /scale``."""

    elasticity_factor: int
    max_elasticity_factor: int
    live_processors: int
    task_count: int
    key_hash: str  # the job's key-bucket hash (grouping.key_hash)


class ScaleAccepted(Response):
    """``POST /scale`` answer."""

    job_model_version: int
