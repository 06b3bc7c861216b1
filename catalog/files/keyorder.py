"""The order every merge sorts changes in: primary key, then sequence; and where keys change.

Shared by the merge kernel (:mod:`catalog.files.merge`) and the filling of partial rows
(:mod:`catalog.files.partial`), which must see the changes of a key in exactly the same order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc


def sort_spec(primary_key: Sequence[str], sequence_column: str | None) -> list[tuple[str, str]]:
    columns = list(primary_key)
    if sequence_column is not None and sequence_column not in columns:
        columns.append(sequence_column)
    return [(c, "ascending") for c in columns]


def key_changes(column: pa.ChunkedArray | pa.Array) -> npt.NDArray[np.bool_]:
    """``out[i]`` is True when sorted row ``i + 1`` holds a different value from row ``i``."""
    n = len(column)
    different = pc.not_equal(column.slice(1), column.slice(0, n - 1))
    return np.asarray(different.to_numpy(zero_copy_only=False), dtype=np.bool_)
