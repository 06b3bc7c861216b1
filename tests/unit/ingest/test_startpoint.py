"""The rule that decides where batch 0 of a checkpoint starts (ingest.startpoint)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest import startpoint
from ingest.startpoint import CheckpointState, SavedStart, Start, StartOrigin, decide

CATALOG = {"t": {"0": 40, "1": 17}}
RESOLVED = {"t": {"0": 99, "1": 98}}
SAVED_CONFIG = SavedStart({"t": {"0": 5, "1": 6}}, StartOrigin.CONFIG, "latest")
SAVED_CATALOG = SavedStart({"t": {"0": 30, "1": 10}}, StartOrigin.CATALOG, "latest")


def resolve_config() -> dict[str, dict[str, int]]:
    return RESOLVED


def must_not_resolve() -> dict[str, dict[str, int]]:
    raise AssertionError("the configured start must not be resolved again")


def state(planned: bool, finished: bool, saved: SavedStart | None) -> CheckpointState:
    return CheckpointState(planned=planned, finished=finished, saved=saved)


def test_a_finished_batch_hands_the_start_to_spark() -> None:
    for saved in (None, SAVED_CONFIG):
        found = decide(state(True, True, saved), CATALOG, "latest", must_not_resolve)
        assert found == Start(StartOrigin.CHECKPOINT, None)


@pytest.mark.parametrize("saved", [SAVED_CONFIG, SAVED_CATALOG])
def test_a_planned_unfinished_batch_zero_replays_from_the_saved_start(saved: SavedStart) -> None:
    # even though the catalog moved on (batch 0 committed there before the crash)
    found = decide(state(True, False, saved), CATALOG, "latest", must_not_resolve)
    assert found == Start(StartOrigin.SAVED, saved.offsets)


def test_with_nothing_planned_the_catalog_decides() -> None:
    for saved in (None, SAVED_CONFIG, SAVED_CATALOG):
        found = decide(state(False, False, saved), CATALOG, "earliest", must_not_resolve)
        assert found == Start(StartOrigin.CATALOG, CATALOG)


def test_a_resolved_configured_start_is_kept_until_the_catalog_has_offsets() -> None:
    found = decide(state(False, False, SAVED_CONFIG), None, "latest", must_not_resolve)
    assert found == Start(StartOrigin.SAVED, SAVED_CONFIG.offsets)


def test_a_changed_configuration_is_resolved_anew() -> None:
    found = decide(state(False, False, SAVED_CONFIG), None, "earliest", resolve_config)
    assert found == Start(StartOrigin.CONFIG, RESOLVED)


def test_a_fresh_checkpoint_without_catalog_offsets_resolves_the_configuration() -> None:
    assert decide(state(False, False, None), None, "latest", resolve_config) == Start(
        StartOrigin.CONFIG, RESOLVED
    )


def test_a_checkpoint_from_before_saved_starts_falls_back_to_the_catalog() -> None:
    found = decide(state(True, False, None), CATALOG, "earliest", must_not_resolve)
    assert found == Start(StartOrigin.CATALOG, CATALOG)


def test_saved_starts_survive_a_round_trip_through_the_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / ".0.crc").write_text("")  # Spark's checksum files do not count
    startpoint.save(tmp_path, Start(StartOrigin.CONFIG, RESOLVED), "latest")
    read = startpoint.read_state(tmp_path)
    assert read == state(False, False, SavedStart(RESOLVED, StartOrigin.CONFIG, "latest"))
    (tmp_path / "offsets" / "0").write_text("v1")
    assert startpoint.read_state(tmp_path).planned


def test_replaying_a_saved_start_does_not_rewrite_it(tmp_path: Path) -> None:
    startpoint.save(tmp_path, Start(StartOrigin.CATALOG, CATALOG), "earliest")
    before = (tmp_path / startpoint.START_FILE).stat().st_mtime_ns
    startpoint.save(tmp_path, Start(StartOrigin.SAVED, CATALOG), "earliest")
    assert (tmp_path / startpoint.START_FILE).stat().st_mtime_ns == before


def test_the_incarnation_changes_only_while_nothing_is_planned(tmp_path: Path) -> None:
    fresh = startpoint.incarnation(tmp_path, state(False, False, None))
    assert startpoint.incarnation(tmp_path, state(True, False, None)) == fresh
    assert startpoint.incarnation(tmp_path, state(True, True, None)) == fresh
    assert startpoint.incarnation(tmp_path, state(False, False, None)) != fresh
