"""This folder's helper: a second Spark job, as a user writes one: it follows a CDC table's
changes with ``spark.readStream.format("lakestream")`` and keeps an aggregate table (amount
and orders per region) current, exactly once.

Exactly once rests on two things: Spark's checkpoint says which versions a micro-batch holds
(a restarted query replays an unfinished batch with the same versions and the same batch id),
and each batch's commit to the aggregate table carries the idempotency key (job, batch id), so
a replayed batch that had already committed lands nothing twice.

Run: ``python -m tests.integration.spark_read.support DSN CHECKPOINT`` (AvailableNow).
With ``AGGREGATE_JOB_KILL_AFTER_BATCH=N`` the job kills itself (SIGKILL) right after batch N's
commit to the catalog, before Spark records the batch as done: the worst moment to die.
"""

from __future__ import annotations

import os
import signal
import sys

import pyarrow as pa
from pyspark.sql import DataFrame

from catalog import Catalog, IdempotencyKey
from catalog.changefeed import CHANGE_TYPE
from ingest.spark_read import SOURCE_NAME, register
from ingest.spark_session import local_spark
from jobs.spark_env import spark_host

SOURCE = "shop.orders"
TARGET = "shop.region_totals"
JOB = "region-totals"
TOTALS = pa.schema([("region", pa.string()), ("amount", pa.int64()), ("orders", pa.int64())])
SIGNS = {"insert": 1, "update_postimage": 1, "delete": -1, "update_preimage": -1}


def deltas(changes: pa.Table) -> dict[str, tuple[int, int]]:
    """Per region: what the changes add to (amount, orders)."""
    out: dict[str, tuple[int, int]] = {}
    for row in changes.select(["region", "amount", CHANGE_TYPE]).to_pylist():
        sign = SIGNS[row[CHANGE_TYPE]]
        amount, orders = out.get(row["region"], (0, 0))
        out[row["region"]] = (amount + sign * (row["amount"] or 0), orders + sign)
    return out


def main(dsn: str, checkpoint: str) -> None:
    kill_after = os.environ.get("AGGREGATE_JOB_KILL_AFTER_BATCH")
    catalog = Catalog.connect(dsn)
    if not catalog.table_exists(TARGET):
        catalog.create_table(TARGET, TOTALS, primary_key=["region"], hash_buckets=1)
    target = catalog.load_table(TARGET)

    def apply(frame: DataFrame, batch_id: int) -> None:
        changes = frame.toArrow()
        print(f"batch {batch_id}: {changes.num_rows} change rows", file=sys.stderr, flush=True)
        if changes.num_rows == 0:
            return
        now = {r["region"]: r for r in target.scan().to_arrow().to_pylist()}
        rows = []
        for region, (amount, orders) in deltas(changes).items():
            old = now.get(region, {"amount": 0, "orders": 0})
            rows.append(
                {
                    "region": region,
                    "amount": old["amount"] + amount,
                    "orders": old["orders"] + orders,
                }
            )
        key = IdempotencyKey(writer_id=JOB, batch_id=batch_id)
        target.upsert(pa.Table.from_pylist(rows, schema=TOTALS), key=key)
        if kill_after is not None and batch_id == int(kill_after):
            os.kill(os.getpid(), signal.SIGKILL)

    spark = local_spark("lakestream-aggregate-job", host=spark_host())
    register(spark)
    stream = (
        spark.readStream.format(SOURCE_NAME)
        .option("catalog", dsn)
        .option("readChangeFeed", "true")
        .option("maxVersionsPerTrigger", "1")
        .option("consumerId", JOB)
        .load(SOURCE)
    )
    query = (
        stream.writeStream.foreachBatch(apply)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
