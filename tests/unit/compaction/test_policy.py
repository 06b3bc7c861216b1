"""Compaction thresholds from table properties: defaults, units, and errors that name the fix."""

from __future__ import annotations

import pytest

from compaction.errors import CompactionError
from compaction.policy import CompactionPolicy, InvalidPolicyError, parse_size


def test_defaults_without_properties():
    policy = CompactionPolicy.from_properties({})
    assert policy == CompactionPolicy()
    assert policy.target_file_size == 128 * 1024 * 1024
    assert policy.is_small(int(128 * 1024 * 1024 * 0.7))
    assert not policy.is_small(int(128 * 1024 * 1024 * 0.7) + 1)


def test_every_property_is_read():
    policy = CompactionPolicy.from_properties(
        {
            "target-file-size": "64MB",
            "compaction.small-file-ratio": "0.5",
            "compaction.min-file-num": "3",
            "compaction.force-after-rounds": "2",
            "compaction.max-sorted-runs": "8",
            "compaction.max-read-amplification": "2.5",
            "compaction.enabled": "FALSE",
            "compaction.rewrite-deleted-ratio": "0.5",
            "compaction.tier-min-files": "6",
            "unrelated": "ignored",
        }
    )
    assert policy == CompactionPolicy(
        target_file_size=64 << 20,
        small_file_ratio=0.5,
        min_file_num=3,
        force_after_rounds=2,
        max_sorted_runs=8,
        max_read_amplification=2.5,
        enabled=False,
        rewrite_deleted_ratio=0.5,
        tier_min_files=6,
    )


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("134217728", 128 << 20),
        ("128MB", 128 << 20),
        ("128 mib", 128 << 20),
        ("1g", 1 << 30),
        ("512kb", 512 << 10),
        ("7b", 7),
        (" 2 TB ", 2 << 40),
    ],
)
def test_sizes_take_units_in_powers_of_1024(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "MB", "1.5MB", "-1", "12 parsecs", "128ib", "0x10"])
def test_sizes_that_are_not_sizes(text):
    with pytest.raises(ValueError):
        parse_size(text)


@pytest.mark.parametrize(
    ("prop", "value"),
    [
        ("target-file-size", "big"),
        ("target-file-size", "0"),
        ("compaction.small-file-ratio", "0"),
        ("compaction.small-file-ratio", "1.5"),
        ("compaction.min-file-num", "0"),
        ("compaction.min-file-num", "2.5"),
        ("compaction.force-after-rounds", "-3"),
        ("compaction.max-sorted-runs", "many"),
        ("compaction.max-read-amplification", "0.9"),
        ("compaction.max-read-amplification", "nan"),
        ("compaction.enabled", "yes"),
        ("compaction.rewrite-deleted-ratio", "0"),
        ("compaction.rewrite-deleted-ratio", "1.2"),
        ("compaction.tier-min-files", "1"),
        ("compaction.tier-min-files", "four"),
    ],
)
def test_a_bad_value_names_the_property_and_the_table(prop, value):
    with pytest.raises(InvalidPolicyError) as caught:
        CompactionPolicy.from_properties({prop: value}, table="shop.orders")
    error = caught.value
    assert isinstance(error, CompactionError)
    assert (error.property, error.value, error.table) == (prop, value, "shop.orders")
    assert prop in str(error) and "shop.orders" in str(error) and value in str(error)
