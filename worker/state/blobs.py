"""The blob store behind one small interface: ``file:///dir`` (the embedded default: one
host, or a shared volume) and ``s3://bucket/prefix`` for any S3-compatible service.

Both through obstore (Rust's ``object_store``, as used by Delta and Iceberg clients):
one client for both backends, multipart uploads of large files, no botocore in the
worker's hot path. Credentials for S3 come from the standard AWS chain
(:func:`s3_credentials`): the variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``), else boto3's own chain (a profile of
the shared files, web identity on Kubernetes, SSO, the container's or instance's
metadata), asked only when credentials expire. The region: ``AWS_REGION`` /
``AWS_DEFAULT_REGION``, else the profile's.
Each request is retried by obstore (exponential backoff on 5xx, connection errors and
timeouts) within :class:`BlobStoreOptions`; the worker retries what still fails.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

import obstore
from obstore.store import LocalStore, S3Store


class BlobStore(Protocol):
    """Named immutable blobs."""

    def put(self, key: str, data: bytes) -> None:
        """Write ``data`` under ``key`` (whole, or not at all)."""
        ...

    def put_file(self, key: str, path: Path) -> None:
        """Upload the file at ``path`` under ``key``."""
        ...

    def get(self, key: str) -> bytes:
        """The blob under ``key`` (KeyError when absent)."""
        ...

    def get_file(self, key: str, path: Path) -> int:
        """Download ``key`` into ``path`` (written beside it, then renamed); its size."""
        ...

    def exists(self, key: str) -> bool:
        """Whether ``key`` is stored."""
        ...

    def list(self, prefix: str) -> Iterator[tuple[str, float]]:
        """(key, last-modified time) of every blob under ``prefix``."""
        ...

    def delete(self, key: str) -> None:
        """Remove ``key`` (nothing if absent)."""
        ...


class ObjectBlobStore:
    """A ``BlobStore`` on an obstore store, under a key prefix."""

    def __init__(self, store: LocalStore | S3Store, prefix: str = "") -> None:
        self._store = store
        self._prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""

    def _key(self, key: str) -> str:
        return self._prefix + key

    def put(self, key: str, data: bytes) -> None:
        """Write ``data`` under ``key``."""
        obstore.put(self._store, self._key(key), data)

    def put_file(self, key: str, path: Path) -> None:
        """Upload ``path`` (multipart when large)."""
        with path.open("rb") as f:
            obstore.put(self._store, self._key(key), f)

    def get(self, key: str) -> bytes:
        """The blob under ``key``."""
        try:
            return bytes(obstore.get(self._store, self._key(key)).bytes())
        except FileNotFoundError as e:
            raise KeyError(key) from e

    def get_file(self, key: str, path: Path) -> int:
        """Stream ``key`` into ``path`` atomically; its size."""
        partial = path.with_name(path.name + ".partial")
        size = 0
        try:
            result = obstore.get(self._store, self._key(key))
        except FileNotFoundError as e:
            raise KeyError(key) from e
        with partial.open("wb") as out:
            for chunk in result.stream(min_chunk_size=1 << 20):
                out.write(chunk)
                size += len(chunk)
        partial.rename(path)
        return size

    def exists(self, key: str) -> bool:
        """Whether ``key`` is stored."""
        try:
            obstore.head(self._store, self._key(key))
        except FileNotFoundError:
            return False
        return True

    def list(self, prefix: str) -> Iterator[tuple[str, float]]:
        """(key, last modified) under ``prefix``."""
        for batch in obstore.list(self._store, prefix=self._key(prefix)):
            for meta in batch:
                yield meta["path"][len(self._prefix):], meta["last_modified"].timestamp()

    def delete(self, key: str) -> None:
        """Remove ``key``."""
        with contextlib.suppress(FileNotFoundError):
            obstore.delete(self._store, self._key(key))


@dataclass(frozen=True, slots=True)
class BlobStoreOptions:
    """How one request to an S3 blob store may take and be retried (obstore's client
    and retry settings). A request that still fails fails its commit (or restore), which
    the worker tries again with backoff until the store is back: an outage is never
    fatal, so these bound one attempt, not the worker's patience."""

    timeout_s: float = 60.0  # one request, from start to end (a multipart part each)
    connect_timeout_s: float = 5.0
    retries: int = 3  # of one request: 5xx answers, connection errors, timeouts
    retry_timeout_s: float = 30.0  # no retry of a request begins after this

    def __post_init__(self) -> None:
        if min(self.timeout_s, self.connect_timeout_s, self.retry_timeout_s) <= 0 \
                or self.retries < 0:
            raise ValueError("blob store timeouts must be positive and retries at least 0, "
                             f"got {self}")


def open_blob_store(url: str, endpoint: str | None = None,
                    options: BlobStoreOptions | None = None) -> ObjectBlobStore:
    """The blob store of ``url``: ``file:///dir`` or ``s3://bucket[/prefix]``
    (``endpoint``: an S3-compatible service's URL, e.g. MinIO or a test server)."""
    options = options or BlobStoreOptions()
    parsed = urlparse(url)
    if parsed.scheme == "file":
        root = Path(parsed.path)
        root.mkdir(parents=True, exist_ok=True)
        return ObjectBlobStore(LocalStore(str(root)))
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ValueError(f"an s3 blob store URL names a bucket: s3://BUCKET[/PREFIX], "
                             f"got {url!r}")
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        extra: dict[str, Any] = {}
        provider, profile_region = s3_credentials()
        if provider is not None:
            extra["credential_provider"] = provider
            region = region or profile_region
        if endpoint:
            extra["endpoint"] = endpoint
        store = S3Store(
            parsed.netloc, region=region or "us-east-1",
            client_options={"allow_http": bool(endpoint and endpoint.startswith("http:")),
                            "timeout": timedelta(seconds=options.timeout_s),
                            "connect_timeout": timedelta(seconds=options.connect_timeout_s)},
            retry_config={"max_retries": options.retries,
                          "retry_timeout": timedelta(seconds=options.retry_timeout_s)},
            virtual_hosted_style_request=False, **extra)
        return ObjectBlobStore(store, parsed.path)
    raise ValueError(f"blob store URL must be file:///DIR or s3://BUCKET[/PREFIX], got {url!r}")


def s3_credentials() -> tuple[Any, str | None]:
    """(None, None) when the environment holds the keys (object_store reads them, and
    web identity and instance metadata, itself); else boto3's credential chain, which
    also reads the shared files' profiles (``AWS_PROFILE``), SSO and the rest, as the
    AWS CLI does, and the profile's region."""
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        return None, None
    try:
        import boto3  # noqa: PLC0415 (the worker extra has it)
        from obstore.auth.boto3 import Boto3CredentialProvider  # noqa: PLC0415
    except ImportError:  # no boto3: object_store's own chain
        return None, None
    session = boto3.Session()
    return Boto3CredentialProvider(session), session.region_name
