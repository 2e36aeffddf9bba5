"""Coordinator processes for worker tests (the service tests' fixture), and the blob
stores state tests run against: a local folder and moto's S3 API server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.local.s3 import LocalS3
from tests.service.conftest import start_server
from worker.state.blobs import ObjectBlobStore, open_blob_store

__all__ = ["blob_store_url", "blobs", "start_server"]


@pytest.fixture(params=["file", "s3"])
def blob_store_url(request: pytest.FixtureRequest, tmp_path: Path
                   ) -> Iterator[tuple[str, str | None]]:
    """(blob store URL, S3 endpoint or None): a folder, then a fresh bucket on moto's S3
    API server (the session's)."""
    if request.param == "file":
        yield f"file://{tmp_path / 'blobs'}", None
        return
    server: LocalS3 = request.getfixturevalue("s3_server")
    bucket = f"b-{uuid.uuid4().hex[:10]}"
    server.create_bucket(bucket)
    yield f"s3://{bucket}/jobs/orders", server.endpoint


@pytest.fixture
def blobs(blob_store_url: tuple[str, str | None]) -> ObjectBlobStore:
    """The blob store of ``blob_store_url``, opened."""
    return open_blob_store(*blob_store_url)
