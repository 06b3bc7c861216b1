"""The ``lakestream`` command with an s3:// warehouse, configured the way a deployment does it:
the warehouse URI and the store's settings in the environment, secrets never echoed."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from catalog import Catalog
from tests.fixtures.cli import lakestream
from tests.fixtures.s3 import ACCESS_KEY, REGION, SECRET_KEY, S3Server

pytestmark = pytest.mark.integration


@pytest.fixture
def store_env(s3_server: S3Server, s3_warehouse: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)  # only the settings may reach the store
    monkeypatch.setenv("LAKESTREAM_CATALOG__WAREHOUSE", s3_warehouse)
    monkeypatch.setenv("LAKESTREAM_CATALOG__STORAGE__ENDPOINT", s3_server.endpoint)
    monkeypatch.setenv("LAKESTREAM_CATALOG__STORAGE__REGION", REGION)
    monkeypatch.setenv("LAKESTREAM_CATALOG__STORAGE__ACCESS_KEY", ACCESS_KEY)
    monkeypatch.setenv("LAKESTREAM_CATALOG__STORAGE__SECRET_KEY", SECRET_KEY)


@pytest.mark.usefixtures("store_env")
def test_init_and_vacuum_run_against_the_bucket(
    s3_catalog: Catalog, s3_warehouse: str, catalog_dsn: str
):
    log = s3_catalog.create_table("shop.log", pa.schema([("id", pa.int64())]))
    log.append(pa.table({"id": [1, 2]}))
    orphan = log.meta.files.open_output("data/part-dead-writer.parquet")
    orphan.sink.write(b"a writer died before preparing its commit")
    orphan.commit()

    init = lakestream("catalog", "init", dsn=catalog_dsn)
    vacuum = lakestream(
        "tables", "vacuum", "shop.log", "--older-than", "0", "--json", dsn=catalog_dsn
    )

    assert init.returncode == 0 and f"warehouse {s3_warehouse}" in init.stdout
    assert vacuum.returncode == 0, vacuum.stderr
    assert json.loads(vacuum.stdout)["paths"] == ["data/part-dead-writer.parquet"]
    assert not log.meta.files.exists("data/part-dead-writer.parquet")
    assert log.scan().count() == 2
    for run in (init, vacuum):
        assert SECRET_KEY not in run.stdout + run.stderr


@pytest.mark.usefixtures("store_env")
def test_a_warehouse_without_a_bucket_is_one_line_and_exit_code_2(
    catalog_dsn: str, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("LAKESTREAM_CATALOG__WAREHOUSE", "s3:///lake")
    run = lakestream("catalog", "init", dsn=catalog_dsn)
    assert run.returncode == 2
    assert "names no bucket" in run.stderr and len(run.stderr.strip().splitlines()) == 1
