"""The blob store's S3 credentials come from the standard AWS chain (#51), against an S3
API that checks them (moto's server with authentication enforced: one IAM user, one
access key): a profile of the shared files (``AWS_PROFILE``, as the AWS CLI reads it),
the environment's keys, and a wrong secret refused with S3's reason."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from service.local.s3 import LocalS3
from worker.state.blobs import open_blob_store

AWS_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION",
                 "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE")


@pytest.fixture(scope="module")
def checked_s3() -> Iterator[LocalS3]:
    server = LocalS3.start(enforce_auth=True)
    yield server
    server.stop()


@pytest.fixture
def bucket(checked_s3: LocalS3) -> str:
    assert checked_s3.access_key is not None
    name = f"state-{uuid.uuid4().hex[:8]}"
    key_id, secret = checked_s3.access_key
    boto3.client("s3", endpoint_url=checked_s3.endpoint, region_name="us-east-1",
                 aws_access_key_id=key_id, aws_secret_access_key=secret
                 ).create_bucket(Bucket=name)
    return name


@pytest.fixture
def no_aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    # no ~/.aws of this machine's user either
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.mark.usefixtures("no_aws_environment")
def test_a_profile_of_the_shared_files_signs_the_requests(
        checked_s3: LocalS3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert checked_s3.access_key is not None
    key_id, secret = checked_s3.access_key
    (tmp_path / "credentials").write_text(
        f"[coxswain]\naws_access_key_id = {key_id}\naws_secret_access_key = {secret}\n")
    (tmp_path / "config").write_text("[profile coxswain]\nregion = eu-west-1\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_PROFILE", "coxswain")
    store = open_blob_store(f"s3://{bucket}/job", checked_s3.endpoint)
    store.put("snapshot/1", b"state")
    assert store.get("snapshot/1") == b"state"
    assert [k for k, _ in store.list("snapshot/")] == ["snapshot/1"]


@pytest.mark.usefixtures("no_aws_environment")
def test_environment_keys_sign_and_a_wrong_secret_is_refused(
        checked_s3: LocalS3, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert checked_s3.access_key is not None
    key_id, secret = checked_s3.access_key
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    store = open_blob_store(f"s3://{bucket}/job", checked_s3.endpoint)
    store.put("a", b"1")
    assert store.get("a") == b"1"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    wrong = open_blob_store(f"s3://{bucket}/job", checked_s3.endpoint)
    with pytest.raises(Exception, match=r"403|SignatureDoesNotMatch"):
        wrong.put("b", b"2")
