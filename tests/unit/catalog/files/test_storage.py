"""The storage seam without services: which locations are usable, and secrets that never show."""

from __future__ import annotations

import pickle
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from pydantic import SecretStr

from catalog import StorageError, StorageOptions, TableMeta
from catalog.files import read_files, storage_for, write_data_files
from catalog.files.storage import normalize_warehouse, parse_location, redact_location
from catalog.names import TableName
from catalog.partitioning import PartitionSpec

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize(
    ("location", "scheme"),
    [
        ("/data/wh", ""),
        ("relative/wh", ""),
        ("file:///data/wh", ""),
        ("s3://bucket/prefix", "s3"),
        ("S3://bucket", "s3"),
        ("gs://bucket/p", "gs"),
        ("abfs://container@account.dfs.core.windows.net/p", "abfs"),
        ("hdfs://namenode:8020/wh", "hdfs"),
    ],
)
def test_known_locations_parse(location: str, scheme: str) -> None:
    assert parse_location(location)[0] == scheme


@pytest.mark.parametrize(
    ("location", "says"),
    [
        ("ftp://host/wh", "unknown storage scheme 'ftp'"),
        ("s3:///prefix", "names no bucket"),
        ("gs://", "names no bucket"),
    ],
)
def test_unusable_locations_fail_with_a_clear_error(location: str, says: str) -> None:
    with pytest.raises(StorageError, match=says):
        parse_location(location)


def test_a_warehouse_uri_is_stored_without_slash_and_never_with_credentials() -> None:
    assert normalize_warehouse("s3://bucket/wh/") == "s3://bucket/wh"
    assert normalize_warehouse("file:///tmp/wh/../wh") == "/tmp/wh"
    for leaky in (f"s3://AKIA:{SECRET}@bucket/wh", f"s3://bucket/wh?secret_key={SECRET}"):
        with pytest.raises(StorageError) as caught:
            normalize_warehouse(leaky)
        assert SECRET not in str(caught.value) and "storage options" in str(caught.value)
    assert redact_location(f"s3://AKIA:{SECRET}@bucket/wh?x={SECRET}") == "s3://bucket/wh"


def test_options_mask_their_secrets_yet_reach_executors_whole() -> None:
    options = StorageOptions(
        endpoint="http://127.0.0.1:9000",
        access_key=SecretStr("AKIAEXAMPLE"),
        secret_key=SecretStr(SECRET),
        session_token=SecretStr(SECRET + "-token"),
    )
    meta = TableMeta(
        table_id=uuid.uuid4(),
        name=TableName("ns", "t"),
        location="s3://bucket/wh/ns/t",
        spec=PartitionSpec((), -1),
        primary_key=(),
        properties={},
        schemas={0: pa.schema([("a", pa.int64())])},
        current_schema_id=0,
        storage=options,
    )
    shown = f"{options!r} {options} {meta!r} {options.model_dump()}"
    assert SECRET not in shown and "AKIAEXAMPLE" not in shown
    shipped = pickle.loads(pickle.dumps(meta))  # what a Spark task receives
    assert shipped.storage.secret_key is not None
    assert shipped.storage.secret_key.get_secret_value() == SECRET
    assert SECRET not in repr(shipped.files)


def test_options_refuse_unknown_keys_and_endpoints_without_scheme(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="extra"):
        StorageOptions(secret="x")  # type: ignore[call-arg]
    with pytest.raises(StorageError, match="scheme"):
        storage_for("s3://bucket/wh", StorageOptions(endpoint="127.0.0.1:9000"))


def test_a_local_location_keeps_temp_and_rename_and_lists_what_it_wrote(tmp_path: Path) -> None:
    storage = storage_for(f"file://{tmp_path}/t")
    data = pa.table({"a": list(range(10))})
    [written] = write_data_files(data, storage)

    assert storage.local and storage.exists(written.path)
    assert [f.path for f in storage.list_files()] == [written.path]
    assert not any(p.name.endswith(".tmp") for p in tmp_path.rglob("*"))
    assert pa.Table.from_batches(read_files(storage, [written], data.schema)).equals(data)
    assert storage.delete(written.path) and not storage.delete(written.path)
    assert storage.discard([written.path]) == []
