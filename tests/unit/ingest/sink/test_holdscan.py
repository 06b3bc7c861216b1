"""The tasks' hold in C (``ingest/sink/_holdscan.c``) against its Python reference
(``HeldSplit.fast_py``): the same events held with the same ids and ranks, the same masks per
transaction, the same odd and malformed blocks, whatever the blocks' text (any valid JSON:
keys in any order, spaces, escapes, repeated keys, nested values, ranks of any type) and
however the decoder cuts them into calls; a candidate's runs come by position, and name the
same transaction; and a build older than its source is never used."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.debezium import BlockText, RecordChunk
from ingest.sink import _holdscan, held
from ingest.sink.held import HeldSplit
from ingest.sink.plan import ShippedIds
from ingest.transactions.ranges import BITWISE_LIMIT, MAX_RANK
from tests.fixtures.debezium_events import block_text

#: Ids that look alike (see test_held_split.py), any text of digits and colons.
LOOKALIKE = ["12:5", "12:6", "12:", "12:x", "123:5", "12", "1:25", "12:5:6", ":5", "", "١٢:٣",
             "12:٣", "uuid-1:7", "00000025:00000d08:0025"]  # fmt: skip
TEXT_IDS = st.one_of(st.sampled_from(LOOKALIKE), st.text(alphabet="0123456789:ab", max_size=8))
#: An id as JSON text: a string (plain, or with escapes that read as one of the same ids), or
#: something else entirely.
ID_JSON = st.one_of(
    TEXT_IDS.map(lambda t: orjson.dumps(t).decode()),
    st.sampled_from(['"12\\u003a5"', '"1\\"2"', '"\\u0661\\u0662"', '"12\\/5"', '"a\\\\"']),
    st.sampled_from(["null", "7", "true", "[]", '{"id":"12"}']),
)
RANK_JSON = st.one_of(
    st.integers(1, 70).map(str),
    st.sampled_from(["0", "-1", "63", "64", str(BITWISE_LIMIT), str(BITWISE_LIMIT + 1),
                     str(MAX_RANK + 1), str(2**70), "true", '"3"', "null", "2.0", "1e1"]),
)  # fmt: skip
EXTRA_JSON = st.sampled_from([
    '"data_collection_order":1', '"data_collection_order":"x\\"y}"', '"other":null',
    '"nested":{"total_order":9,"id":"99"}', '"list":[1,{"a":"]"},"\\\\"]', '"f":-1.5e3',
])  # fmt: skip
SPACE = st.sampled_from(["", " ", "\n ", "\t"])


@st.composite
def block_texts(draw: st.DrawFn) -> bytes:
    """A block's text: mostly an object of an id and a rank (in any order, maybe one missing or
    twice, with other keys), sometimes any other JSON value."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from([b'"x"', b"5", b"[1]", b"null", b"", b"{}", b"[]"]))
    pairs = [f'"id":{draw(ID_JSON)}', f'"total_order":{draw(RANK_JSON)}']
    pairs += draw(st.lists(EXTRA_JSON, max_size=2))
    if draw(st.integers(0, 7)) == 0:
        pairs.append(draw(st.sampled_from(pairs)))  # a key twice: the last one counts
    if draw(st.integers(0, 9)) == 0:
        pairs.pop(draw(st.integers(0, len(pairs) - 1)))  # a key missing
    pairs = draw(st.permutations(pairs))
    space = draw(SPACE)
    text = ("{" + space + ("," + space).join(p.replace(":", space + ":" + space, 1)
                                             for p in pairs) + space + "}").encode()  # fmt: skip
    orjson.loads(text)  # valid JSON, as msgspec hands blocks over
    return text


BLOCKS = st.lists(st.one_of(st.none(), block_texts()), max_size=80)


def envelope(text: bytes | None) -> bytes:
    """A change event holding the block (what the Python paths read for an odd one)."""
    return b'{"op":"c","after":{"id":1},"transaction":' + (text or b"null") + b"}"


def run_hold(
    fast: Callable[[HeldSplit], Any],
    texts: list[bytes | None],
    publish: frozenset[str],
    cuts: list[int],
) -> tuple[object, ...]:
    """What a task's hold reports after taking the blocks in calls cut at ``cuts``: the events
    held, the masks per transaction (positions named by the candidates), the malformed count
    and the held rows."""
    blocks: list[BlockText | None] = [None if t is None else msgspec.Raw(t) for t in texts]
    values = [envelope(t) for t in texts]
    chunk = RecordChunk("t", 0, list(range(len(blocks))), [None] * len(blocks), values,
                        [0] * len(blocks))  # fmt: skip
    split = HeldSplit(publish)
    taken: list[int] = []
    for lo, hi in zip([0, *cuts], [*cuts, len(blocks)], strict=True):
        held_now = fast(split)(chunk, 0, range(lo, hi), blocks[lo:hi])
        assert held_now == sorted(held_now)  # RecordHold.fast: ascending
        taken.extend(lo + at for at in held_now)
    ranks = split.txn_ranks()
    candidates = publish.ordered[: publish.candidates] if isinstance(publish, ShippedIds) else ()
    rows = split.held()
    return (
        taken,
        dict(ranks.items(candidates)),
        split.malformed,
        [] if rows is None else sorted(zip(*(rows.column(c).to_pylist() for c in
                                             ("offset", "txn_id", "total_order")), strict=True)),
    )  # fmt: skip


PUBLISHED = st.lists(st.sampled_from(["12", "123", "12:x", "1", "", "uuid-1:7", "7", "١٢:٣"]),
                     unique=True)  # fmt: skip


@settings(max_examples=600, deadline=None)
@given(BLOCKS, PUBLISHED, st.data())
def test_the_c_loop_holds_and_counts_what_the_python_loop_does(
    texts: list[bytes | None], published: list[str], data: st.DataObject
) -> None:
    candidates = data.draw(st.integers(0, len(published)))
    publish = ShippedIds(published, candidates)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(texts)), max_size=4)))
    with pytest.MonkeyPatch.context() as patch:  # the C loop even where HOLD_LOOP says no
        patch.setattr(held, "_SCAN", _holdscan.Scanner)
        native = run_hold(lambda s: s.fast, texts, publish, cuts)
    python = run_hold(lambda s: s.fast_py, texts, publish, cuts)
    assert native == python


def test_a_candidates_runs_come_by_position_and_the_others_by_id() -> None:
    """The runs of the batch's candidates carry no id: their position in the publish set's
    order; a transaction published before (no position) and one held come by id."""
    texts = [bytes(block_text(raw, order)) for raw, order in
             [("8:1", 1), ("8:2", 2), ("5:3", 1), ("9:4", 1), ("8:5", 3), ("4:6", 1)]]  # fmt: skip
    publish = ShippedIds(["5", "8", "9"], 2)  # 5 and 8 candidates, 9 published before
    split = HeldSplit(publish)
    blocks: list[BlockText | None] = [msgspec.Raw(t) for t in texts]
    chunk = RecordChunk("t", 0, list(range(6)), [None] * 6, [envelope(t) for t in texts], [0] * 6)
    assert split.fast(chunk, 0, range(6), blocks) == [5]  # transaction 4 is not published
    ranks = split.txn_ranks()
    positions, masks = ranks.positions()
    assert positions.tolist() == [1, 0, 1] and masks.tolist() == [0b110, 0b10, 0b1000]
    assert ranks.candidates == 2
    assert sorted(ranks.narrow().column("id").to_pylist()) == ["4", "9"]
    assert dict(ranks.items(["5", "8"])) == {"8": 0b1110, "5": 0b10, "9": 0b10, "4": 0b10}
    with pytest.raises(ValueError, match="2 candidates"):
        dict(ranks.items())  # without the candidates nobody can name them


def test_the_index_finds_every_id_it_was_given_and_nothing_else() -> None:
    ids = ["12", "١٢", "a\udc80b", "", "7:9", "12"]  # non-ASCII, a lone surrogate, empty, twice
    index = _holdscan.PublishIndex(ids, 3)
    assert [index.position(t) for t in ids] == [0, 1, 2, -1, -1, 0]
    assert len(index) == 5 and index.candidates == 3
    assert index.position("13") is None and "13" not in index and "7:9" in index
    assert index.position(12) is None  # type: ignore[arg-type]  # not a str: not published
    with pytest.raises(ValueError, match="4 candidates"):
        _holdscan.PublishIndex(["1", "2"], 4)
    with pytest.raises(TypeError, match="must be str"):
        _holdscan.PublishIndex(["1", 2], 1)  # type: ignore[list-item]


def test_a_long_transaction_keeps_its_ranks_past_64_bits() -> None:
    texts = [bytes(block_text(f"7:{n}", n)) for n in range(1, 300)]
    publish = ShippedIds(["7"], 1)
    native = run_hold(lambda s: s.fast, list(texts), publish, [50, 64, 65, 200])
    assert native == run_hold(lambda s: s.fast_py, list(texts), publish, [])
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
    texts = [bytes(block_text("5:1", 1)), bytes(block_text("6:2", 1))]
    result = run_hold(lambda s: s.fast, list(texts), ShippedIds(["5"], 1), [])
    assert result[0] == [1]  # transaction 6 is not published: held
    assert result[1] == {"5": 2, "6": 2}
