"""Row writes and statements that lose to a real concurrent commit rebase and try again with
growing back-off (fake time), and give up with a typed CommitConflict when the policy is spent."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from catalog import Catalog, CommitConflict, ConflictKind, Table
from tests.fixtures.racing import FakeTime, RacingCatalog, racing_pair

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])


@pytest.fixture
def catalogs(catalog_dsn: str, warehouse: Path) -> Iterator[tuple[RacingCatalog, Catalog]]:
    with racing_pair(catalog_dsn, warehouse) as pair:
        yield pair


def rows(ids: list[int], v: str) -> pa.Table:
    return pa.table({"id": ids, "v": [v] * len(ids)}, schema=SCHEMA)


def sorted_rows(table: Table) -> list[tuple[int, str]]:
    data = table.scan().to_arrow().sort_by("id")
    return list(zip(data.column("id").to_pylist(), data.column("v").to_pylist(), strict=True))


def race_until(rival_write: Callable[[int], None], races: int) -> Callable[[int], None]:
    def race(commit: int) -> None:
        if commit <= races:
            rival_write(commit)

    return race


CDC_WRITES: dict[str, Callable[[Table, FakeTime], object]] = {
    "upsert": lambda t, time: t.upsert(rows([1], "mine"), retry=time.policy(4)),
    "delete": lambda t, time: t.delete(pa.table({"id": [1]}), retry=time.policy(4)),
}


@pytest.mark.parametrize("write", sorted(CDC_WRITES))
def test_a_cdc_write_retries_with_back_off_then_gives_up(catalogs, write: str):
    mine, rival = catalogs
    table = mine.create_table("app.users", SCHEMA, primary_key=["id"], hash_buckets=1)
    other = rival.load_table("app.users")
    mine.race_with(race_until(lambda n: other.upsert(rows([100 + n], "rival")), races=99))
    time = FakeTime()
    with pytest.raises(CommitConflict) as raised:
        CDC_WRITES[write](table, time)
    assert raised.value.kind is ConflictKind.CONCURRENT_WRITE
    assert time.sleeps == [0.1, 0.2, 0.4]  # four attempts, growing pauses between them
    assert mine.commits == 4
    assert [r[0] for r in sorted_rows(table)] == [101, 102, 103, 104]  # only the rival's


def test_an_upsert_lands_once_the_race_is_over(catalogs):
    mine, rival = catalogs
    table = mine.create_table("app.users", SCHEMA, primary_key=["id"], hash_buckets=1)
    other = rival.load_table("app.users")
    mine.race_with(race_until(lambda n: other.upsert(rows([100 + n], "rival")), races=2))
    time = FakeTime()
    table.upsert(rows([1], "mine"), retry=time.policy(4))
    assert time.sleeps == [0.1, 0.2]
    assert sorted_rows(table) == [(1, "mine"), (101, "rival"), (102, "rival")]


def test_an_update_statement_is_evaluated_again_with_back_off_then_gives_up(catalogs):
    mine, rival = catalogs
    table = mine.create_table("app.events", SCHEMA)
    table.append(rows([1, 2], "old"))
    other = rival.load_table("app.events")
    mine.race_with(race_until(lambda n: other.append(rows([100 + n], "old")), races=99))
    time = FakeTime()
    with pytest.raises(CommitConflict) as raised:
        table.update(where=[("v", "=", "old")], set={"v": "new"}, retry=time.policy(3))
    assert raised.value.kind is ConflictKind.CONCURRENT_WRITE
    assert time.sleeps == [0.1, 0.2]
    assert {v for _, v in sorted_rows(table)} == {"old"}


def test_an_update_statement_lands_on_the_version_that_won(catalogs):
    mine, rival = catalogs
    table = mine.create_table("app.events", SCHEMA)
    table.append(rows([1, 2], "old"))
    other = rival.load_table("app.events")
    mine.race_with(race_until(lambda n: other.append(rows([100 + n], "old")), races=1))
    time = FakeTime()
    result = table.update(where=[("v", "=", "old")], set={"v": "new"}, retry=time.policy(3))
    assert time.sleeps == [0.1] and result.attempts == 2
    assert sorted_rows(table) == [(1, "new"), (2, "new"), (101, "new")]
