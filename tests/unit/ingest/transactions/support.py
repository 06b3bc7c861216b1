"""Builders of markers and event sightings for the book's tests."""

from __future__ import annotations

from collections.abc import Iterable

from ingest.transactions import MarkerStatus, TransactionMarker, TxnEvents


def end(
    txn: str, count: int, *tables: tuple[str, int], ts_ms: int | None = None
) -> TransactionMarker:
    """The END marker of ``txn`` with ``count`` events (per table counts if given)."""
    return TransactionMarker(MarkerStatus.END, txn, count, tuple(tables), ts_ms)


def begin(txn: str) -> TransactionMarker:
    return TransactionMarker(MarkerStatus.BEGIN, txn)


def seen(orders: Iterable[int], position: int | None = None) -> TxnEvents:
    """Events of ranks ``orders``; ``position`` the greatest one's source position (as a number)."""
    hexed = None if position is None else f"{position:032x}"
    return TxnEvents.of(orders, hexed)
