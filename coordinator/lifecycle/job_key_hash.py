"""Which key hash a job uses, decided once per coordinator start: the job keeps the
function it was created with, and a change is refused while anything recorded depends on
it.

What depends on the function is every key-bucket checkpoint under a factor above 1 (a
bucket's offsets and skip watermarks, which task holds a bucket's per-key state): under
another function those buckets would hold other keys, so records would be skipped or
processed twice and per-key state split wrongly. Under factor 1 a partition's only
bucket holds every key whatever the function, so such entries are safe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from coordinator.errors import CoordinatorError
from grouping.key_hash import CONFIG_KEY, DEFAULT_KEY_HASH, KeyHash, key_hash_of, parse_key_hash


class KeyHashChangeRefused(CoordinatorError):
    """A configured key hash other than the job's, while checkpoints depend on the job's."""

    code = "key_hash_change_refused"


def choose_key_hash(desired: Mapping[str, Any], latest_config: Mapping[str, Any] | None,
                    configured: KeyHash | None,
                    hash_dependent_entries: Callable[[], int]) -> KeyHash:
    """The key hash this job runs with.

    ``desired``: the operator-set config in the store (``keyHash`` once recorded);
    ``latest_config``: the newest job model's config, None when there is none (a job
    whose models predate ``keyHash`` used crc32); ``configured``: what this replica was
    started with (None: keep the job's, the default for a new job);
    ``hash_dependent_entries()``: how many checkpoint entries depend on the function
    (read only for a change).

    Raises:
        KeyHashChangeRefused: ``configured`` differs from the job's function and
            ``hash_dependent_entries`` is not 0; nothing was changed.
    """
    recorded = desired.get(CONFIG_KEY)
    if recorded is not None:
        current: KeyHash | None = parse_key_hash(recorded)
    elif latest_config is not None:
        current = key_hash_of(latest_config)
    else:
        current = None  # a new job
    if current is None:
        return configured or DEFAULT_KEY_HASH
    if configured is None or configured == current:
        return current
    dependent = hash_dependent_entries()
    if dependent:
        raise KeyHashChangeRefused(
            f"this job's key hash is {current.value} and {dependent} key-bucket "
            f"checkpoint entries under an elasticity factor above 1 depend on it; "
            f"--key-hash {configured.value} would put records in buckets whose offsets and "
            f"state are other keys' (records skipped or processed twice, per-key state "
            f"split wrongly). Keep --key-hash {current.value} (or leave it unset), or start "
            f"a new job (a new --store, or --job), or, for a stateless job, POST "
            f"/checkpoints/reset for every input partition (its bucket entries become one "
            f"whole-partition start) and restart with the new --key-hash")
    return configured
