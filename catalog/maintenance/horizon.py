"""Which versions expiry may remove: the horizon, as a pure function of the table's state.

Every version below the horizon expires; the horizon itself and everything newer stays. It is
the smallest of what each rule protects, so every rule holds at once:

* the newest ``retain_last`` versions;
* the version a read at ``now - older_than`` sees (the latest committed at or before that time),
  so time travel to any instant inside the window keeps working;
* ``keep`` (e.g. the base version of a compaction the queue still runs);
* the latest version, always.

The horizon never moves backwards: versions already expired do not come back.
"""

from __future__ import annotations


def choose_horizon(
    *,
    latest: int,
    oldest: int,
    retain_last: int,
    version_at_cut: int | None,
    keep: int | None = None,
) -> int:
    """The oldest version to keep. ``version_at_cut`` is None when no version was committed at
    or before the time cut (every version is inside the time window)."""
    if retain_last < 1:
        raise ValueError("retain_last must be at least 1")
    horizon = latest - retain_last + 1
    horizon = min(horizon, version_at_cut if version_at_cut is not None else oldest)
    if keep is not None:
        horizon = min(horizon, keep)
    return max(oldest, min(horizon, latest))
