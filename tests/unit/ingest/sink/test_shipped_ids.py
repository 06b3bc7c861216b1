"""The publish set travels to the tasks as one JSON array, in its order, and is read back once
per worker."""

from __future__ import annotations

import pickle

from hypothesis import given
from hypothesis import strategies as st
from pyspark import cloudpickle

from ingest.sink.plan import ShippedIds


@given(st.lists(st.text(), unique=True))
def test_any_ids_come_back_as_they_went(ids: list[str]) -> None:
    back = pickle.loads(cloudpickle.dumps(ShippedIds(ids)))
    assert back == frozenset(ids) and isinstance(back, ShippedIds)
    assert all(t in back for t in ids) and "not one of them" not in back
    assert back.ordered == tuple(ids)


def test_a_worker_reads_the_same_ids_once_and_other_ids_afresh() -> None:
    """Every task of a batch unpickles the same plan: its second task finds the set its first
    read (the same object), and the next batch's different set is read afresh."""
    shipped = cloudpickle.dumps(ShippedIds([f"{n}:{n * 7}" for n in range(20_000)]))
    first, second = pickle.loads(shipped), pickle.loads(shipped)
    assert second is first
    assert first._members is None  # no set built until something asks it
    later = pickle.loads(cloudpickle.dumps(ShippedIds(["1:7", "3:21"])))
    assert later == {"1:7", "3:21"} and later is not first
    assert pickle.loads(shipped) == first  # the earlier set again: read again, equal
