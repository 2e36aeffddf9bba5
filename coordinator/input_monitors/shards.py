"""Kinesis shards discovered with ListShards, and what the coordinator does with them.

Like the Kafka partition monitor, every replica polls (its ``/status`` tells the truth) and
only the leader acts, and an unreachable endpoint or a missing stream never wipes the
job model. Unlike Kafka partitions, shards come and go: a split or a merge closes parents
and opens children (new partitions, the parents' ending sequence numbers), and a closed
shard trimmed after the retention period leaves the listing. The leader applies each
listing as it is: the stream's partitions become exactly the listed shards, and the
lineage goes into the job model's config (``grouping.shards``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

from coordinator.input_monitors.poller import (
    InputPoller,
    InputState,
    SourceUnavailable,
    StreamStatus,
)
from grouping.shards import Shard, ShardFormatError, shards_from_listing


class ShardSource(Protocol):
    """Where shard listings come from."""

    def list_shards(self, stream: str) -> list[Mapping[str, Any]] | None:
        """Every shard of ``stream`` (all pages), as ListShards gives them; None when
        there is no such stream. Raises SourceUnavailable."""
        ...


class KinesisShardSource:
    """ListShards of a Kinesis API endpoint (boto3; credentials from the usual AWS
    variables or files)."""

    def __init__(self, endpoint: str | None, region: str | None, timeout_s: float = 5.0
                 ) -> None:
        try:
            import boto3  # noqa: PLC0415 (optional: coxswain[kinesis])
            from botocore.config import Config  # noqa: PLC0415
        except ImportError as e:  # a slim coordinator install
            raise RuntimeError("Kinesis inputs need boto3: pip install 'coxswain[kinesis]'"
                               ) from e
        region = (region or os.environ.get("AWS_REGION")
                  or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1")
        self._client = boto3.client(
            "kinesis", endpoint_url=endpoint, region_name=region,
            config=Config(connect_timeout=timeout_s, read_timeout=timeout_s,
                          retries={"max_attempts": 2}))

    def list_shards(self, stream: str) -> list[Mapping[str, Any]] | None:
        from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

        shards: list[Mapping[str, Any]] = []
        token: str | None = None
        try:
            while True:
                # the first page names the stream; the next ones only the token (API rule)
                page = (self._client.list_shards(NextToken=token, MaxResults=1000) if token
                        else self._client.list_shards(StreamName=stream, MaxResults=1000))
                shards.extend(dict(s) for s in page.get("Shards", []))
                token = page.get("NextToken")
                if not token:
                    return shards
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return None
            raise SourceUnavailable(f"Kinesis refused ListShards: {e}") from e
        except BotoCoreError as e:
            raise SourceUnavailable(f"Kinesis unreachable: {e}") from e


class ShardMonitor(InputPoller):
    """Polls the shards of the monitored Kinesis streams and applies them (leader)."""

    def __init__(
        self,
        system_streams: Iterable[tuple[str, str]],
        source: ShardSource,
        interval_s: float,
        apply: Callable[[str, str, Mapping[int, Shard]], Awaitable[object]],
        is_leader: Callable[[], bool],
    ) -> None:
        super().__init__(system_streams, interval_s, is_leader, "shard-monitor")
        self._source = source
        self._apply = apply

    async def poll_once(self) -> None:
        """One poll of every stream: record what Kinesis says; on the leader, apply it."""
        for system, stream in self._streams:
            before = self._status[(system, stream)]
            try:
                listing = await asyncio.to_thread(self._source.list_shards, stream)
                shards = None if listing is None else shards_from_listing(listing)
            except (SourceUnavailable, ShardFormatError) as e:
                self._set(StreamStatus(system, stream, before.partitions, before.observed,
                                       InputState.UNREACHABLE, str(e)))
                continue
            if not shards:
                self._set(StreamStatus(system, stream, before.partitions, None,
                                       InputState.MISSING,
                                       f"stream {stream!r} does not exist (or has no shards)"))
                continue
            self._set(StreamStatus(system, stream, len(shards), len(shards), InputState.OK,
                                   _describe(shards)))
            if self._is_leader():
                await self._apply(system, stream, shards)



def _describe(shards: Mapping[int, Shard]) -> str:
    open_ = [p for p, s in shards.items() if not s.closed]
    return f"{len(open_)} open shards, {len(shards) - len(open_)} closed"
