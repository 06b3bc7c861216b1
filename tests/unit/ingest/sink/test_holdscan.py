"""The tasks' hold in C (``ingest/sink/_holdscan.c``) against its Python reference
(``HeldSplit.fast_py``): the same events held with the same ids and ranks, the same masks per
transaction, the same odd and malformed blocks, whatever the blocks and however the decoder
cuts them into calls; and a build older than its source is never used."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.debezium import RecordChunk
from ingest.debezium.fastpath import TransactionBlock
from ingest.sink import _holdscan, held
from ingest.sink.held import HeldSplit
from ingest.transactions.ranges import BITWISE_LIMIT, MAX_RANK

#: Ids that look alike (see test_held_split.py), any text of digits and colons, and non-strings.
LOOKALIKE = ["12:5", "12:6", "12:", "12:x", "123:5", "12", "1:25", "12:5:6", ":5", "", "١٢:٣",
             "12:٣", "uuid-1:7", "00000025:00000d08:0025"]  # fmt: skip
IDS = st.one_of(
    st.sampled_from(LOOKALIKE),
    st.text(alphabet="0123456789:ab", max_size=8),
    st.none(),
    st.integers(0, 99),
)
RANKS = st.one_of(
    st.integers(1, 70),
    st.sampled_from([0, -1, 63, 64, BITWISE_LIMIT, BITWISE_LIMIT + 1, MAX_RANK + 1, 2**70]),
    st.sampled_from([True, "3", None, 2.0]),
)
BLOCKS = st.lists(st.one_of(st.none(), st.builds(TransactionBlock, IDS, RANKS)), max_size=80)


def run_hold(
    fast: Callable[[HeldSplit], Any],
    blocks: list[TransactionBlock | None],
    publish: frozenset[str],
    cuts: list[int],
) -> tuple[object, ...]:
    """What a task's hold reports after taking ``blocks`` in calls cut at ``cuts``."""
    chunk = RecordChunk("t", 0, list(range(len(blocks))), [None] * len(blocks),
                        [b"{}"] * len(blocks), [0] * len(blocks))  # fmt: skip
    split = HeldSplit(publish)
    taken: list[int] = []
    for lo, hi in zip([0, *cuts], [*cuts, len(blocks)], strict=True):
        held = fast(split)(chunk, 0, range(lo, hi), blocks[lo:hi])
        assert held == sorted(held)  # RecordHold.fast: ascending
        taken.extend(lo + at for at in held)
    masks: dict[str, int] = {}
    for txn, mask in split.txn_ranks().items():
        masks[txn] = masks.get(txn, 0) | mask
    rows = split.held()
    return (
        taken,
        masks,
        split.malformed,
        [] if rows is None else sorted(zip(*(rows.column(c).to_pylist() for c in
                                             ("offset", "txn_id", "total_order")), strict=True)),
    )  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(BLOCKS, st.data())
def test_the_c_loop_holds_and_counts_what_the_python_loop_does(
    blocks: list[TransactionBlock | None], data: st.DataObject
) -> None:
    publish = frozenset(data.draw(st.lists(st.sampled_from(["12", "123", "12:x", "1", ""]))))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(blocks)), max_size=4)))
    with pytest.MonkeyPatch.context() as patch:  # the C loop even where HOLD_LOOP says no
        patch.setattr(held, "_SCAN", _holdscan.scan)
        native = run_hold(lambda s: s.fast, blocks, publish, cuts)
    python = run_hold(lambda s: s.fast_py, blocks, publish, cuts)
    assert native == python


def test_a_long_transaction_keeps_its_ranks_past_64_bits() -> None:
    blocks: list[TransactionBlock | None] = [TransactionBlock(f"7:{n}", n) for n in range(1, 300)]
    native = run_hold(lambda s: s.fast, blocks, frozenset(), [50, 64, 65, 200])
    assert native == run_hold(lambda s: s.fast_py, blocks, frozenset(), [])
    assert native[1] == {"7": (1 << 300) - 2}  # ranks 1..299, once each


def test_this_install_runs_the_c_loop() -> None:
    """The project's own set-up builds the extension (dev/setup); a test run that silently fell
    back to Python would measure and test the other loop."""
    assert held.HOLD_LOOP == "native"


def test_a_build_older_than_its_source_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_holdscan, "SOURCE_SHA256", "0" * 64)
    scan, why = held._load_scan()
    assert scan is None
    assert "older than _holdscan.c" in why


def test_without_the_c_loop_the_hold_runs_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(held, "_SCAN", None)
    blocks: list[TransactionBlock | None] = [TransactionBlock("5:1", 1), TransactionBlock("6:2", 1)]
    result = run_hold(lambda s: s.fast, blocks, frozenset({"5"}), [])
    assert result[0] == [1]  # transaction 6 is not published: held
    assert result[1] == {"5": 2, "6": 2}
