"""Replays and reordering never regress a key: the greatest ``_ls_seq`` per key is the truth."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.model import ROW_KIND_COLUMN, ROW_KIND_DELETE
from ingest.debezium import SEQ_COLUMN, DecoderConfig, RawRecord, decode_records
from tests.fixtures.debezium_events import (
    CUSTOMER_FIELDS,
    CUSTOMER_KEY_FIELDS,
    customer,
    key,
    mysql_source,
    payload,
    pg_source,
    record,
    value,
)

TABLE = "public.customers"
Change = tuple[str, int, str | None]  # op, id, email


def source_at(step: int, mysql: bool) -> dict[str, Any]:
    if not mysql:
        return pg_source(1_000 + 56 * step)
    # Three changes per binlog event, seven events per file: rollovers happen often.
    file_number, rest = divmod(step, 21)
    return mysql_source(f"mysql-bin.{file_number + 1:06d}", 4 + 300 * (rest // 3), rest % 3)


def messages(changes: list[Change], mysql: bool) -> list[RawRecord]:
    """The Debezium messages of ``changes`` with PostgreSQL's default replica identity."""
    out = []
    for step, (op, id_, email) in enumerate(changes):
        if op == "d":
            body = payload("d", before={"id": id_}, source=source_at(step, mysql))
        else:
            body = payload(op, after=customer(id_, email), source=source_at(step, mysql))
        message_key = key({"id": id_}, CUSTOMER_KEY_FIELDS)
        out.append(record(value(body, CUSTOMER_FIELDS), message_key, offset=step))
    return out


def model(changes: list[Change]) -> dict[int, str | None]:
    state: dict[int, str | None] = {}
    for op, id_, email in changes:
        if op == "d":
            state.pop(id_, None)
        else:
            state[id_] = email
    return state


def merged(batches: list[list[RawRecord]]) -> dict[int, str | None]:
    """What a merge-on-read reader sees: per key the row with the greatest position."""
    latest: dict[int, dict[str, Any]] = {}
    for batch in batches:
        decoded = decode_records(batch, DecoderConfig())
        assert decoded.dead_letters == ()
        for table in decoded.tables:
            for row in table.rows.to_pylist():
                known = latest.get(row["id"])
                if known is None or row[SEQ_COLUMN] >= known[SEQ_COLUMN]:
                    latest[row["id"]] = row
    return {
        id_: row["email"] for id_, row in latest.items() if row[ROW_KIND_COLUMN] != ROW_KIND_DELETE
    }


changes_strategy = st.lists(
    st.tuples(
        st.sampled_from(["c", "u", "d"]),
        st.integers(1, 4),
        st.one_of(st.none(), st.text("abc", min_size=1, max_size=3)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(changes_strategy, st.booleans(), st.data())
def test_replays_and_reordering_never_regress_a_key(
    changes: list[Change], mysql: bool, data: st.DataObject
) -> None:
    delivered = messages(changes, mysql)
    # A connector restart re-emits everything from an earlier point; Kafka delivers the lot in
    # any order across partitions and batches.
    replay_from = data.draw(st.integers(0, len(delivered)), label="replay_from")
    delivered += delivered[replay_from:]
    delivered = data.draw(st.permutations(delivered), label="delivery order")
    cut = data.draw(st.integers(0, len(delivered)), label="batch boundary")
    assert merged([delivered[:cut], delivered[cut:]]) == model(changes)
