import datetime as dt

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalog.errors import InvalidPartitionError
from catalog.partitioning import PartitionSpec, partition_path, typed_value

SPEC = PartitionSpec(("region", "day"), hash_buckets=16)
texts = st.one_of(st.none(), st.text(max_size=20))


@given(region=texts, day=texts, bucket=st.integers(0, 15))
def test_descriptor_round_trips_any_text_and_null(region, day, bucket):
    desc = SPEC.desc({"region": region, "day": day}, bucket)
    assert SPEC.parse(desc) == ({"region": region, "day": day}, bucket)
    assert SPEC.validate(desc) == desc


@given(a=texts, b=texts)
def test_distinct_values_give_distinct_descriptors_and_paths(a, b):
    spec = PartitionSpec(("k",))
    if a != b:
        assert spec.desc({"k": a}) != spec.desc({"k": b})
        assert partition_path(spec.desc({"k": a})) != partition_path(spec.desc({"k": b}))


def test_null_empty_and_the_word_null_are_three_partitions():
    spec = PartitionSpec(("k",))
    descs = {spec.desc({"k": v}) for v in (None, "", "null", "%N", "NULL")}
    assert len(descs) == 5


def test_separators_never_leak_into_the_path():
    desc = SPEC.desc({"region": "a=b,c/d%e", "day": ".."}, 3)
    assert desc.count(",") == 2 and desc.count("=") == 3
    path = partition_path(desc)
    assert path.split("/") == [p for p in desc.split(",")]
    assert ".." not in path.split("/")


def test_typed_values_come_back_as_the_column_type():
    assert typed_value("2026-11-22", pa.date32()) == dt.date(2026, 11, 22)
    assert typed_value("42", pa.int64()) == 42
    assert typed_value(None, pa.int64()) is None
    with pytest.raises(InvalidPartitionError):
        typed_value("x", pa.int64())


@pytest.mark.parametrize(
    "desc",
    [
        "region=eu",
        "region=eu,day=1",
        "day=1,region=eu,bucket=0001",
        "region=eu,day=1,bucket=16",
        "region=eu,day=1,bucket=x",
        "region=%zz,day=1,bucket=0001",
        "region=eu,day=1,bucket=1",
    ],
)
def test_malformed_descriptors_are_refused(desc):
    with pytest.raises(InvalidPartitionError):
        SPEC.validate(desc)


def test_bucket_rules():
    with pytest.raises(InvalidPartitionError):
        PartitionSpec((), hash_buckets=0)
    with pytest.raises(InvalidPartitionError):
        PartitionSpec(("bucket",))
    with pytest.raises(InvalidPartitionError):
        PartitionSpec(("a",)).desc({"a": 1}, bucket=0)
    assert PartitionSpec(()).desc({}) == ""
