"""``lakestream status JOB`` and the source watermark in ``tables history``, as a user runs them:
commits built by hand as a consistent-mode ingest job makes them, lag against a real broker."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from catalog import Catalog, CommitRequest, IdempotencyKey, SourcePoint, SourceWatermark
from catalog.writes import stage_append
from tests.fixtures.broker import KafkaTestHelper
from tests.fixtures.cli import lakestream

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("amount", pa.int64())])
SOURCE_TIME = dt.datetime(2026, 11, 24, 9, 30, tzinfo=dt.UTC)
HELD_FOR = dt.timedelta(seconds=90)


def commit_batch(
    catalog: Catalog, offsets: dict[str, object], exceptions: tuple[str, ...] = ()
) -> None:
    table = (
        catalog.load_table("bank.debits")
        if catalog.table_exists("bank.debits")
        else catalog.create_table("bank.debits", SCHEMA)
    )
    point = SourcePoint(
        position=f"{0x1A2B3C:016x}{0:016x}", source_time=SOURCE_TIME, transaction="571:53195829"
    )
    catalog.commit(
        CommitRequest(
            tables=(stage_append(table.meta, pa.table({"amount": [1]}, schema=SCHEMA)),),
            key=IdempotencyKey(writer_id="bank:inc1", batch_id=len(table.history())),
            progress_key="bank",
            source_offsets=offsets,
            source_watermark=SourceWatermark(batch=point, exceptions=exceptions),
            job_state={
                "transactions": {},
                "held": {
                    "transactions": 2,
                    "events": 5,
                    "oldest_first_seen": (dt.datetime.now(dt.UTC) - HELD_FOR).isoformat(),
                    "blocking": "571:53195900",
                },
            },
        )
    )


def test_history_shows_each_versions_source_watermark(catalog: Catalog, catalog_dsn: str):
    commit_batch(catalog, {"t": {"0": 1}})
    commit_batch(catalog, {"t": {"0": 2}}, exceptions=("571:53195830",))
    text = lakestream("tables", "history", "bank.debits", dsn=catalog_dsn)
    assert text.returncode == 0, text.stderr
    newest, older = text.stdout.splitlines()[1:3]
    assert "1a2b3c:0 @2026-11-24 09:30:00 exceptions:1" in newest
    assert "1a2b3c:0 @2026-11-24 09:30:00" in older and "exceptions" not in older
    rows = json.loads(
        lakestream("tables", "history", "bank.debits", "--json", dsn=catalog_dsn).stdout
    )
    assert rows[0]["source_watermark"] == {
        "position": f"{0x1A2B3C:016x}{0:016x}",
        "source_time": "2026-11-24T09:30:00Z",
        "transaction": "571:53195829",
        "exceptions": ["571:53195830"],
    }


def test_status_of_an_unknown_job_is_one_line_and_exit_2(catalog: Catalog, catalog_dsn: str):
    found = lakestream("status", "nosuchjob", dsn=catalog_dsn)
    assert found.returncode == 2
    assert found.stderr.count("\n") == 1 and "no job named 'nosuchjob'" in found.stderr


def test_status_shows_the_last_batch_watermark_held_and_lag(
    catalog: Catalog, catalog_dsn: str, kafka: KafkaTestHelper
):
    topic = kafka.topic(partitions=2)
    kafka.produce(topic, [(b"k", b"v")] * 5, partition=0)
    kafka.produce(topic, [(b"k", b"v")] * 3, partition=1)
    commit_batch(catalog, {topic: {"0": 2, "1": 3}})
    got = lakestream(
        "status", "bank", "--json", "--bootstrap-servers", kafka.bootstrap_servers, dsn=catalog_dsn
    )
    assert got.returncode == 0, got.stderr
    status = json.loads(got.stdout)
    assert status["batch_id"] == 0 and status["total_lag"] == 3
    lag = {(p["partition"], p["committed"], p["end"], p["lag"]) for p in status["lag"]}
    assert lag == {(0, 2, 5, 3), (1, 3, 3, 0)}
    behind = next(p for p in status["lag"] if p["lag"])
    assert 0 <= behind["lag_s"] < 120
    assert status["held"]["transactions"] == 2 and status["held"]["blocking"] == "571:53195900"
    assert 90 <= status["held"]["oldest_age_s"] < 150
    assert status["source_watermark"]["batch"]["transaction"] == "571:53195829"
    assert status["source_watermark_age_s"] > 0
    screen = lakestream(
        "status", "bank", "--bootstrap-servers", kafka.bootstrap_servers, dsn=catalog_dsn
    ).stdout
    assert "1a2b3c:0 @2026-11-24 09:30:00" in screen
    assert "2 transaction(s), 5 event(s), oldest for 1m3" in screen
    assert f"{topic}-0" in screen and "3 record(s) in all" in screen


def test_status_takes_the_job_catalog_and_brokers_from_the_jobs_yaml(
    catalog: Catalog, catalog_dsn: str, kafka: KafkaTestHelper, tmp_path: Path
):
    topic = kafka.topic()
    kafka.produce(topic, [(b"k", b"v")] * 4, partition=0)
    commit_batch(catalog, {topic: {"0": 1}})
    config = {
        "job": "bank",
        "catalog": {"dsn": catalog_dsn},
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers},
        "checkpoint": str(tmp_path / "checkpoint"),
    }
    (tmp_path / "ingest.yaml").write_text(yaml.safe_dump(config))
    got = lakestream("status", "--config", str(tmp_path / "ingest.yaml"), "--json", dsn="")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["total_lag"] == 3
