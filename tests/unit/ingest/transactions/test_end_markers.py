"""The driver's END markers read fast (``decode_end``: a msgspec decoder typed for Debezium's END,
BEGIN markers passed over by their first bytes) against the full parse (``decode_marker``), and
the book's states built straight from records (``build_ends_of``) against ``build_ends`` of the
markers: for any record - an END as Debezium writes it, spaced, reordered, with odd ids, counts
and collections, cut short or bytes flipped, a BEGIN, a tombstone, no marker at all - the same
markers, the same states, the same refusals."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.transactions.book import TxnState, build_ends, build_ends_at, build_ends_of
from ingest.transactions.markers import (
    BadTransactionMetadata,
    MarkerStatus,
    TransactionMarker,
    decode_end,
    decode_ends,
    decode_marker,
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


def utf8(value: bytes) -> bool:
    try:
        value.decode()
    except UnicodeDecodeError:
        return False
    return True


def full_parse(value: bytes | None) -> TransactionMarker | None:
    """What ``decode_end`` must give, by the full parse: the END, None for anything else."""
    marker = decode_marker(None, value)
    return marker if marker is not None and marker.status is MarkerStatus.END else None


@settings(max_examples=800, deadline=None)
@given(st.lists(records(), max_size=12))
def test_the_fast_read_gives_what_the_full_parse_gives(values: list[bytes | None]) -> None:
    """Records a BEGIN's first bytes name, and empty ones, are passed over unparsed (Debezium
    writes no other record so); every other record of valid UTF-8 reads as the full parse reads
    it (msgspec skips a key it does not know without checking its bytes)."""
    for value in values:
        if not value or value.startswith(b'{"status":"BEGIN","id":"'):
            assert decode_end(value) is None
            continue
        if not utf8(value):
            continue
        expected = exactly(outcome(lambda v=value: full_parse(v)))  # type: ignore[misc]
        assert exactly(outcome(lambda v=value: decode_end(v))) == expected  # type: ignore[misc]
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
        b'{"status":"END","id":"1","event_count":1,"data_collections":[}',
        b'{"status" :"BEGIN","id":"1"}',
    ],
)
def test_odd_and_repeated_keys_read_as_the_full_parse_reads_them(value: bytes) -> None:
    assert exactly(outcome(lambda: decode_end(value))) == exactly(
        outcome(lambda: full_parse(value))
    )


def test_debeziums_end_reads_into_its_marker() -> None:
    end = (b'{"status":"END","id":"733:26386680","event_count":3,"data_collections":'
           b'[{"data_collection":"public.a","event_count":2},'
           b'{"data_collection":"public.b","event_count":1}],"ts_ms":1718000000000}')  # fmt: skip
    values = [b'{"status":"BEGIN","id":"733:26386320"}', end, None, b""]
    assert end_markers(values) == [None, decode_end(end), None, None]
    assert decode_end(end) == TransactionMarker(
        MarkerStatus.END, "733", 3, (("public.a", 2), ("public.b", 1)), 1718000000000,
        f"{26386680:016x}" + "0" * 16,
    )  # fmt: skip


#: The collections a book may read (None: not known).
WANTED = st.sampled_from([None, frozenset(), frozenset({"public.t0"}),
                          frozenset({"public.t0", "public.t1", "s.é"})])  # fmt: skip


@settings(max_examples=800, deadline=None)
@given(st.lists(records(), max_size=12), WANTED)
def test_ends_read_straight_into_states_are_the_states_of_their_markers(
    values: list[bytes | None], wanted: frozenset[str] | None
) -> None:
    """The book's states of the records' ENDs, built record by record with their shapes
    shared, are ``build_ends`` of ``decode_end``: the same states, the same refusals; and
    record by record, None for all but the ENDs."""
    for value in values:
        expected = outcome(lambda v=value: build_ends(decode_ends([v]), wanted, 7.0)[0])  # type: ignore[misc]
        assert outcome(lambda v=value: build_ends_of([v], wanted, 7.0)[0]) == expected  # type: ignore[misc]
    if all(outcome(lambda v=v: decode_end(v)) != "refused" for v in values):  # type: ignore[misc]
        at = build_ends_at(values, wanted, 7.0)
        assert [s is None for s in at] == [decode_end(v) is None for v in values]
        assert [s for s in at if s] == build_ends(decode_ends(values), wanted, 7.0)[0]
        assert all(type(s) is TxnState for s in at if s)
