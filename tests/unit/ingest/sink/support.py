"""Reports as the tasks' C loop makes them, for the driver's side of the tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ingest.sink.report import TxnRanks


def placed_ranks(
    placed: Sequence[tuple[int, int]], by_id: Sequence[tuple[str, int]], candidates: int
) -> TxnRanks:
    """A task's ranks: runs of candidates by (position, mask), the others by (id, mask)."""
    masks = np.array([m for _, m in placed], "<u8").tobytes()
    positions = np.array([p for p, _ in placed], "<i4").tobytes()
    ranks = TxnRanks.of_pairs([t for t, _ in by_id], [m for _, m in by_id])
    if not placed:
        return ranks
    return ranks.model_copy(update={"placed": masks + positions, "candidates": candidates})
