# The C extension built from _holdscan.c (see its source for what scan and ends return).
from collections.abc import Sequence
from typing import Any

SOURCE_SHA256: str

def scan(
    blocks: Sequence[Any],
    publish: frozenset[str],
    txn: str,
    extends: str | None,
    mask: int,
    holding: bool,
    limit: int,
    /,
) -> tuple[
    list[tuple[int, str, int]], list[int], list[str], list[int], str, str | None, int, bool
]: ...
def ends(
    values: Sequence[bytes | None],
    seen: dict[bytes, Any],
    marker_type: type[tuple[Any, ...]],
    end_status: object,
    /,
) -> tuple[list[Any], list[int]]: ...
