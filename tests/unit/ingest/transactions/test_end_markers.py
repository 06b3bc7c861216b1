"""The driver's END markers in C (``ends`` and ``end_states`` in ``ingest/sink/_holdscan.c``)
against their Python reference (``decode_end``, and ``build_ends`` of it): for any record - an
END as Debezium writes it, spaced, reordered, with odd ids, counts and collections, cut short or
bytes flipped, a BEGIN, a tombstone, no marker at all - :func:`end_markers` gives what
``decode_end`` gives, and ``build_ends_of`` the states ``build_ends`` makes of those markers, or
each raises what the reference raises; and the C loops do read the common END themselves."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.sink import _holdscan
from ingest.transactions import book as book_module
from ingest.transactions import markers
from ingest.transactions.book import TxnState, build_ends, build_ends_at, build_ends_of
from ingest.transactions.markers import (
    BadTransactionMetadata,
    MarkerStatus,
    TransactionMarker,
    decode_end,
    decode_ends,
    end_markers,
)

LOOKALIKE_IDS = ["733:26386680", "733:", ":26386680", "733", "733:26386680:1", "0:0",
                 "12:18446744073709551615", "12:18446744073709551616", "7:000000000000000000000042",
                 "uuid-1:7", "00000025:00000d08:0025", "١٢:٣", "12:٣", "", "a\"b", "a\\b",
                 "tab\there", "é:1"]  # fmt: skip
IDS = st.one_of(st.sampled_from(LOOKALIKE_IDS), st.text(alphabet="0123456789:ab", max_size=10))
COUNTS = st.one_of(
    st.integers(0, 40),
    st.sampled_from([10**17, 10**18 - 1, 10**18, 2**63, -1, 1.0, "3", None, True]),
)
COLLECTION = st.fixed_dictionaries(
    {
        "data_collection": st.sampled_from(
            ["public.t0", "public.t1", "s.é", "", 'a"]b', "a\\", '\\"', 'x\\\\"]']
        ),
        "event_count": COUNTS,
    }
)
COLLECTIONS = st.one_of(st.lists(COLLECTION, max_size=3), st.none(), st.just("x"), st.just({}))
MISSING = object()


PLAIN_COUNTS = st.one_of(st.integers(0, 40), st.sampled_from([10**18 - 1, 10**18, 2**63]))
PLAIN_COLLECTIONS = st.lists(
    st.fixed_dictionaries(
        {
            "data_collection": st.sampled_from(["public.t0", "public.t1"]),
            "event_count": st.integers(0, 20),
        }
    ),
    max_size=3,
)


@st.composite
def end_objects(draw: st.DrawFn) -> dict[str, Any]:
    """An END as Debezium writes it (half of them), or one with a field changed, dropped,
    doubled or added."""
    if draw(st.booleans()):
        fields: dict[str, Any] = {
            "status": "END",
            "id": draw(st.one_of(st.sampled_from(LOOKALIKE_IDS[:10]),
                                 st.text(alphabet="0123456789:ab", min_size=1, max_size=24))),
            "event_count": draw(PLAIN_COUNTS),
            "data_collections": draw(st.one_of(PLAIN_COLLECTIONS, st.none(), st.just(MISSING))),
            "ts_ms": draw(st.one_of(PLAIN_COUNTS, st.none(), st.just(MISSING))),
        }  # fmt: skip
        return {k: v for k, v in fields.items() if v is not MISSING}
    fields = {
        "status": draw(st.sampled_from(["END"] * 8 + ["BEGIN", "end", "ENDX"])),
        "id": draw(IDS),
        "event_count": draw(COUNTS),
        "data_collections": draw(st.one_of(COLLECTIONS, st.just(MISSING))),
        "ts_ms": draw(st.one_of(st.integers(0, 2 * 10**12), st.none(), st.just(MISSING), COUNTS)),
    }
    if draw(st.booleans()):
        fields[draw(st.sampled_from(["schema", "payload", "extra", "ts_ms", "id"]))] = draw(COUNTS)
    if draw(st.integers(0, 9)) == 0:
        fields.pop(draw(st.sampled_from(sorted(fields))))
    return {k: v for k, v in fields.items() if v is not MISSING}


@st.composite
def records(draw: st.DrawFn) -> bytes | None:
    """One record of the transaction topic, as bytes (or a tombstone)."""
    kind = draw(st.integers(0, 19))
    if kind == 0:
        return None
    if kind == 1:
        return draw(st.sampled_from([b"", b'{"status":"BEGIN","id":"1:2"}', b"null", b"[]"]))
    fields = draw(end_objects())
    if draw(st.booleans()):
        fields = dict(draw(st.permutations(list(fields.items()))))
    separators = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,", " :")]))
    text = json.dumps(fields, separators=separators, ensure_ascii=draw(st.booleans()))
    if draw(st.integers(0, 7)) == 0:
        text = (
            draw(st.sampled_from(["", " ", "\n", "\t", "\r"]))
            + text
            + draw(st.sampled_from(["", " ", "\n", "x", "}", ","]))
        )
    value = text.encode()
    if value and draw(st.integers(0, 7)) == 0:  # damaged: cut short, or one byte changed
        at = draw(st.integers(0, len(value) - 1))
        changed = bytes([draw(st.integers(0, 255))])
        value = value[:at] if draw(st.booleans()) else value[:at] + changed + value[at + 1 :]
    return value


def outcome(read: Callable[[], Any]) -> object:
    """What reading gives: its result, or that it raised BadTransactionMetadata."""
    try:
        return read()
    except BadTransactionMetadata:
        return "refused"


def exactly(found: object) -> object:
    """A result with the type of every marker and status in it (== alone would not tell a
    named tuple from a plain one, or the enum from its string)."""
    if isinstance(found, list):
        return [exactly(m) for m in found]
    if isinstance(found, TransactionMarker):
        return (type(found), type(found.status), tuple(found))
    return found


@contextmanager
def collections_read(texts: list[bytes | None]) -> Iterator[None]:
    """``_SEEN_COLLECTIONS`` as a run leaves it, restored after: each text read once in Python
    (the C loop reads only texts Python has read before), or left empty."""
    saved = dict(markers._SEEN_COLLECTIONS)
    markers._SEEN_COLLECTIONS.clear()
    try:
        for value in texts:
            outcome(lambda v=value: decode_end(v))  # type: ignore[misc]
        yield
    finally:
        markers._SEEN_COLLECTIONS.clear()
        markers._SEEN_COLLECTIONS.update(saved)


@settings(max_examples=800, deadline=None)
@given(st.lists(records(), max_size=12), st.booleans())
def test_the_c_loop_reads_every_record_as_decode_end_does(
    values: list[bytes | None], warm: bool
) -> None:
    with collections_read(values if warm else []):
        for value in values:  # one by one: a refused record refuses the whole list
            expected = exactly(outcome(lambda v=value: decode_end(v)))  # type: ignore[misc]
            assert exactly(outcome(lambda v=value: end_markers([v]))) in ([expected], expected)
        if all(outcome(lambda v=v: decode_end(v)) != "refused" for v in values):  # type: ignore[misc]
            assert exactly(end_markers(values)) == exactly([decode_end(v) for v in values])


@pytest.mark.parametrize(
    "value",
    [
        b'{"status":"END","id":"1:5","id":"2:6","event_count":1}',  # JSON's last key wins
        b'{"status":"END","id":"1:5","event_count":1,"event_count":2,"ts_ms":3,"ts_ms":null}',
        b'{"status":"END","status":"END","id":"1","event_count":0}',
        b'{"status":"END","id":"1","event_count":0,"data_collections":[],"data_collections":null}',
        b'{"status":"END","id":"1","event_count":01}',
        b'{"status":"END","id":"1","event_count":-0}',
        b'{"status":"END","id":"1","event_count":1e2}',
        b'{"status":"END","id":"1","event_count":1}{}',
        b'{"status":"END","id":"1","event_count":1,}',
        b'{"status":"END","id":"1","event_count":1,"data_collections":[{"x":"]"}]}',
        b'{"status":"END","id":"1","event_count":1,"data_collections":[{"x":"\\"]"}]}',
        b'{"status":"END","id":"1","event_count":1,"data_collections":[{"x":"\\\\"},"]"]}',
        b'{"status":"END","id":"1","event_count":1,"data_collections":[{"x":"\\\\\\"]"}]}',
        b'{"status":"END","id":"1","event_count":1,"data_collections":[}',
        b'{"status":"END","id":"1","event_count":1,"data_collections":["\\',
        b'{"status":"BEGIN","id":"1"',
        b'{"status" :"BEGIN","id":"1"}',
    ],
)
def test_odd_and_repeated_keys_read_as_decode_end_reads_them(value: bytes) -> None:
    empty = b'{"status":"END","id":"1","event_count":0,"data_collections":[]}'
    with collections_read([value, empty]):
        assert exactly(outcome(lambda: end_markers([value]))) in (
            [exactly(outcome(lambda: decode_end(value)))],
            exactly(outcome(lambda: decode_end(value))),
        )


def test_the_c_loop_reads_debeziums_end_itself() -> None:
    """The common END is not handed back to Python (or the C loop would only cost time)."""
    end = (b'{"status":"END","id":"733:26386680","event_count":3,"data_collections":'
           b'[{"data_collection":"public.a","event_count":2},'
           b'{"data_collection":"public.b","event_count":1}],"ts_ms":1718000000000}')  # fmt: skip
    values = [b'{"status":"BEGIN","id":"733:26386320"}', end, None, b""]
    with collections_read([end]):
        found, odd = _holdscan.ends(
            values, markers._SEEN_COLLECTIONS, TransactionMarker, MarkerStatus.END
        )
    assert odd == []
    assert found == [None, decode_end(end), None, None]
    assert found[1] == TransactionMarker(
        MarkerStatus.END, "733", 3, (("public.a", 2), ("public.b", 1)), 1718000000000,
        f"{26386680:016x}" + "0" * 16,
    )  # fmt: skip


def test_an_end_whose_collections_were_never_read_goes_to_python() -> None:
    end = b'{"status":"END","id":"9","event_count":1,"data_collections":[]}'
    with collections_read([]):
        found, odd = _holdscan.ends([end], markers._SEEN_COLLECTIONS, TransactionMarker,
                                    MarkerStatus.END)  # fmt: skip
        assert (found, odd) == ([None], [0])
        assert end_markers([end]) == [decode_end(end)]  # and Python reads it
        assert markers._SEEN_COLLECTIONS == {b"[]": ()}


def test_without_the_c_loop_ends_are_read_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(markers, "_ENDS", None)
    end = b'{"status":"END","id":"5:80","event_count":2,"ts_ms":7}'
    assert end_markers([end, None]) == [decode_end(end), None]


def test_the_c_loop_refuses_a_marker_type_that_is_no_tuple() -> None:
    with pytest.raises(TypeError):
        _holdscan.ends([], {}, dict, MarkerStatus.END)


#: The collections a book may read (None: not known).
WANTED = st.sampled_from([None, frozenset(), frozenset({"public.t0"}),
                          frozenset({"public.t0", "public.t1", "s.é"})])  # fmt: skip


@settings(max_examples=800, deadline=None)
@given(st.lists(records(), max_size=12), st.booleans(), WANTED)
def test_ends_read_straight_into_states_are_the_states_of_their_markers(
    values: list[bytes | None], warm: bool, wanted: frozenset[str] | None
) -> None:
    """The book's states of the records' ENDs, read without markers (``end_states`` in C,
    which leaves to Python what ``ends`` leaves), are ``build_ends`` of ``decode_end``: the
    same states, the same refusals; and record by record, None for all but the ENDs."""
    with collections_read(values if warm else []):
        for value in values:
            expected = outcome(lambda v=value: build_ends(decode_ends([v]), wanted, 7.0)[0])  # type: ignore[misc]
            assert outcome(lambda v=value: build_ends_of([v], wanted, 7.0)[0]) == expected  # type: ignore[misc]
        if all(outcome(lambda v=v: decode_end(v)) != "refused" for v in values):  # type: ignore[misc]
            at = build_ends_at(values, wanted, 7.0)
            assert [s is None for s in at] == [decode_end(v) is None for v in values]
            assert [s for s in at if s] == build_ends(decode_ends(values), wanted, 7.0)[0]
            assert all(type(s) is TxnState for s in at if s)


def test_the_c_loop_reads_debeziums_end_into_its_state_itself() -> None:
    end = (b'{"status":"END","id":"733:26386680","event_count":3,"data_collections":'
           b'[{"data_collection":"public.a","event_count":2},'
           b'{"data_collection":"public.b","event_count":1}],"ts_ms":1718000000000}')  # fmt: skip
    values = [b'{"status":"BEGIN","id":"733:26386320"}', end, None, b""]
    with collections_read([end]):
        shapes = book_module._shapes(frozenset({"public.a"}))
        found, odd = _holdscan.end_states(values, shapes, TxnState, 5.0)
    assert odd == []
    assert found == [None, build_ends([decode_end(end)], frozenset({"public.a"}), 5.0)[0][0],
                     None, None]  # fmt: skip
    assert found[1] == TxnState("733", 5.0, 0, True, 3, 2, ("public.a", "public.b"),
                                1718000000000, f"{26386680:016x}" + "0" * 16)  # fmt: skip
    with pytest.raises(TypeError):
        _holdscan.end_states([], {}, dict, 5.0)
