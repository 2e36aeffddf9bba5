"""JSON serde of job model types, exactly as in API.md.

Writers emit the camelCase form of API.md. Readers also accept Samza's hyphenated
job-model JSON (``processor-id``, ``task-name``, ``system-stream-partitions``,
``changelog-partition``, ``task-mode``, legacy ``container-id``), SSPs without a
``keyBucket`` or with ``keyBucket: -1`` (whole partition), and ignore unknown fields.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable, Mapping
from typing import Any

from grouping.errors import JobModelFormatError
from grouping.model import (
    WHOLE_PARTITION,
    ContainerModel,
    JobModel,
    SystemStreamPartition,
    TaskMode,
    TaskModel,
)

JsonObject = dict[str, Any]


def ssp_to_json(ssp: SystemStreamPartition) -> JsonObject:
    """``{"system", "stream", "partition", "keyBucket"}``; keyBucket -1 for a whole partition."""
    return {
        "system": ssp.system,
        "stream": ssp.stream,
        "partition": ssp.partition,
        "keyBucket": ssp.key_bucket,
    }


def _field(obj: Mapping[str, Any], where: str, *names: str, default: Any = ...) -> Any:
    for name in names:
        if name in obj:
            return obj[name]
    if default is ...:
        raise JobModelFormatError(f"{where}: missing field {names[0]!r}")
    return default


def _int(value: Any, where: str) -> int:
    # Samza's checkpoint v1 writes partitions as strings; accept decimal strings too.
    if isinstance(value, bool):
        raise JobModelFormatError(f"{where}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    raise JobModelFormatError(f"{where}: expected an integer, got {value!r}")


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise JobModelFormatError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise JobModelFormatError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return value


def ssp_from_json(data: Any, where: str = "ssp") -> SystemStreamPartition:
    """Read an SSP (3-part, or 4-part with ``keyBucket``; -1 or absent = whole partition)."""
    obj = _object(data, where)
    bucket = obj.get("keyBucket", obj.get("key-bucket", WHOLE_PARTITION))
    bucket = WHOLE_PARTITION if bucket is None else _int(bucket, f"{where}.keyBucket")
    partition = _int(_field(obj, where, "partition"), f"{where}.partition")
    if partition < 0:
        raise JobModelFormatError(f"{where}.partition: must be >= 0, got {partition}")
    if bucket < WHOLE_PARTITION:
        raise JobModelFormatError(f"{where}.keyBucket: must be >= -1, got {bucket}")
    return SystemStreamPartition(
        _str(_field(obj, where, "system"), f"{where}.system"),
        _str(_field(obj, where, "stream"), f"{where}.stream"),
        partition,
        bucket,
    )


def task_model_to_json(task: TaskModel) -> JsonObject:
    """The API.md form of a task model."""
    return {
        "taskName": task.name,
        "systemStreamPartitions": [ssp_to_json(s) for s in task.ssps],
        "changelogPartition": task.changelog_partition,
        "taskMode": task.mode.value,
    }


def task_model_from_json(data: Any, where: str = "task") -> TaskModel:
    """Read a task model in API.md or Samza form; a missing or empty task mode is Active."""
    obj = _object(data, where)
    name = _str(_field(obj, where, "taskName", "task-name"), f"{where}.taskName")
    raw_ssps = _field(obj, where, "systemStreamPartitions", "system-stream-partitions")
    if not isinstance(raw_ssps, list):
        raise JobModelFormatError(f"{where}.systemStreamPartitions: expected a list")
    ssps = tuple(ssp_from_json(s, f"{where}.systemStreamPartitions[{i}]")
                 for i, s in enumerate(raw_ssps))
    changelog = _int(
        _field(obj, where, "changelogPartition", "changelog-partition", default=-1),
        f"{where}.changelogPartition",
    )
    raw_mode = _field(obj, where, "taskMode", "task-mode", default=None) or "Active"
    try:
        mode = TaskMode(raw_mode)
    except ValueError as e:
        raise JobModelFormatError(
            f"{where}.taskMode: expected 'Active' or 'Standby', got {raw_mode!r}"
        ) from e
    return TaskModel(name, ssps, changelog, mode)


def container_model_to_json(container: ContainerModel) -> JsonObject:
    """The API.md form of a container model."""
    return {
        "processorId": container.processor_id,
        "locationId": container.location_id,
        "tasks": {name: task_model_to_json(t) for name, t in container.tasks.items()},
    }


def container_model_from_json(data: Any, where: str = "container") -> ContainerModel:
    """Read a container model in API.md or Samza form (``container-id`` as legacy id)."""
    obj = _object(data, where)
    raw_id = _field(obj, where, "processorId", "processor-id", "container-id")
    processor_id = str(raw_id) if isinstance(raw_id, int) and not isinstance(raw_id, bool) \
        else _str(raw_id, f"{where}.processorId")
    location = _field(obj, where, "locationId", "location-id", default="")
    if not isinstance(location, str):
        raise JobModelFormatError(f"{where}.locationId: expected a string")
    tasks_obj = _object(_field(obj, where, "tasks", default={}), f"{where}.tasks")
    tasks = []
    for key, raw in tasks_obj.items():
        task = task_model_from_json(raw, f"{where}.tasks[{key!r}]")
        if task.name != key:
            raise JobModelFormatError(
                f"{where}.tasks[{key!r}]: key does not match taskName {task.name!r}"
            )
        tasks.append(task)
    return ContainerModel.of(processor_id, location, tasks)


def job_model_to_json(model: JobModel) -> JsonObject:
    """The API.md form of a job model (without the barrier state, which is not part of it)."""
    return {
        "version": model.version,
        "config": dict(model.config),
        "containers": {
            pid: container_model_to_json(c) for pid, c in model.containers.items()
        },
    }


def job_model_from_json(data: Any, version: int | None = None) -> JobModel:
    """Read a job model in API.md or Samza form.

    Samza's JSON has no version (it is the znode name), so ``version`` may be given
    instead; when both are present they must agree.
    """
    obj = _object(data, "jobModel")
    raw_version = obj.get("version")
    if raw_version is None:
        if version is None:
            raise JobModelFormatError("jobModel: missing field 'version'")
        found = version
    else:
        found = _int(raw_version, "jobModel.version")
        if version is not None and found != version:
            raise JobModelFormatError(
                f"jobModel.version: body says {found}, caller says {version}"
            )
    if found < 0:
        raise JobModelFormatError(f"jobModel.version: must be >= 0, got {found}")
    config = _object(obj.get("config", {}) or {}, "jobModel.config")
    containers_obj = _object(obj.get("containers", {}), "jobModel.containers")
    containers = []
    for key, raw in containers_obj.items():
        container = container_model_from_json(raw, f"jobModel.containers[{key!r}]")
        if container.processor_id != key:
            raise JobModelFormatError(
                f"jobModel.containers[{key!r}]: key does not match processorId "
                f"{container.processor_id!r}"
            )
        containers.append(container)
    return JobModel.of(found, config, containers)


#: The memo key of a model's container JSON texts (processor id -> text).
CONTAINER_JSON = "container-json"


def container_json_text(container: ContainerModel) -> str:
    """A container's compact JSON (API.md form), in its tasks' order: the text
    ``json.dumps(container_model_to_json(container), separators=(",", ":"))`` gives,
    written out directly. Every container a leave or join changes is rendered again
    before its version is published (100 of them for one of 1000 processors leaving a
    100k-task job), and building the dicts for ``json.dumps`` first cost three times
    as much."""
    quote = _quote  # json.dumps of a str, without its per-call overhead
    streams: dict[tuple[str, str], str] = {}  # a container's tasks share a few streams
    tasks = []
    for name, task in container.tasks.items():
        ssps = []
        for ssp in task.ssps:
            stream = streams.get((ssp.system, ssp.stream))
            if stream is None:
                stream = streams[(ssp.system, ssp.stream)] = (
                    '{"system":' + quote(ssp.system) + ',"stream":' + quote(ssp.stream)
                    + ',"partition":')
            ssps.append(f'{stream}{ssp.partition:d},"keyBucket":{ssp.key_bucket:d}}}')
        quoted = quote(name)
        tasks.append(f'{quoted}:{{"taskName":{quoted},"systemStreamPartitions":['
                     f'{",".join(ssps)}],"changelogPartition":{task.changelog_partition:d},'
                     f'"taskMode":"{task.mode.value}"}}')
    return ('{"processorId":' + quote(container.processor_id) + ',"locationId":'
            + quote(container.location_id) + ',"tasks":{' + ",".join(tasks) + "}}")


#: a str's JSON text as ``json.dumps`` writes it (ASCII, escaped), in C
_quote: Callable[[str], str] = json.encoder.encode_basestring_ascii


def container_texts(model: JobModel) -> Mapping[str, str]:
    """Each container's JSON text, rendered once per model (memoised on it; a
    :class:`ContainerJson` may have rendered it already, reusing unchanged containers)."""
    return model.memo(CONTAINER_JSON,
                      lambda m: {pid: container_json_text(c) for pid, c in m.containers.items()})


class ContainerJson:
    """Container JSON texts for a leader's successive models: a container object the new
    model shares with the one rendered before (incremental generation keeps every
    unchanged one) reuses its text, so a leave or join renders a few containers, not the
    100k tasks of all of them. Both the store's copy and the API's answers use them."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[ContainerModel, str]] = {}

    def of(self, model: JobModel) -> Mapping[str, str]:
        """:func:`container_texts` of ``model``, reusing the previous model's texts."""
        return model.memo(CONTAINER_JSON, self._render)

    def _render(self, model: JobModel) -> dict[str, str]:
        last = self._last
        texts: dict[str, str] = {}
        kept: dict[int, tuple[ContainerModel, str]] = {}
        for pid, container in model.containers.items():
            found = last.get(id(container))
            # the identity check: an id may be reused once its container is gone
            text = found[1] if found is not None and found[0] is container \
                else container_json_text(container)
            texts[pid] = text
            kept[id(container)] = (container, text)
        self._last = kept
        return texts


def containers_json(model: JobModel) -> str:
    """The JSON object of every container, by processor id, joined once per model from
    :func:`container_texts` (the API's full answer and the store's copy both hold it)."""
    def join(m: JobModel) -> str:
        texts = container_texts(m)
        return "{" + ",".join(json.dumps(pid) + ":" + texts[pid] for pid in sorted(texts)) + "}"
    return model.memo("containers-json", join)


def job_model_to_bytes(model: JobModel) -> bytes:
    """Compact UTF-8 JSON (top-level keys sorted, containers by processor id, tasks by
    name): equal models give equal bytes. Built from :func:`containers_json`, so a model
    whose containers were rendered for the API is not rendered again."""
    return ('{"config":' + json.dumps(dict(model.config), separators=(",", ":"),
                                      sort_keys=True)
            + ',"containers":' + containers_json(model) + ',"version":' + str(model.version)
            + "}").encode()


def job_model_from_bytes(raw: bytes, version: int | None = None) -> JobModel:
    """Inverse of :func:`job_model_to_bytes`; also reads Samza's JSON."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise JobModelFormatError(f"jobModel: not valid JSON ({e})") from e
    return job_model_from_json(data, version)
