"""The collector settings of the job's processes (:mod:`ingest.collector`).

Each case runs in a fresh interpreter: freezing and thresholds are the whole process's, and the
test process must keep its own."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from ingest.collector import YOUNG_THRESHOLD


def _run(body: str) -> dict[str, object]:
    """Run ``body`` in a new interpreter; it sets ``out`` (a dict), returned here."""
    script = "import gc, json\nout = {}\n" + textwrap.dedent(body) + "\nprint(json.dumps(out))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_a_worker_freezes_its_imports_at_its_first_task_and_collects_young_objects_rarely() -> None:
    out = _run("""
        from ingest.collector import tune_worker_collector
        default = gc.get_threshold()
        tune_worker_collector()
        out["first"] = [gc.get_freeze_count(), gc.get_threshold()]
        garbage = [[i] for i in range(50_000)]
        tune_worker_collector()  # the worker's next task
        out["next"] = [gc.get_freeze_count(), gc.get_threshold()]
        out["default"] = default
    """)
    frozen, thresholds = out["first"]
    assert frozen > 1_000  # the worker's imports
    assert thresholds == [YOUNG_THRESHOLD, *out["default"][1:]]
    assert out["next"] == out["first"]  # nothing frozen again: the tasks' objects stay collectable


def test_a_workers_later_tasks_do_not_walk_the_frozen_heap() -> None:
    """``gc.get_freeze_count()`` walks every frozen object (7-26 ms in a Spark worker): only
    the worker's first task may ask it."""
    out = _run("""
        from ingest.collector import tune_worker_collector
        asked = []
        count = gc.get_freeze_count
        gc.get_freeze_count = lambda: asked.append(1) or count()
        for _ in range(5):
            tune_worker_collector()
        out["asked"] = len(asked)
        out["frozen"] = count() > 1_000
    """)
    assert out == {"asked": 1, "frozen": True}


def test_the_task_function_tunes_its_worker_before_it_reads_anything() -> None:
    out = _run("""
        from ingest.collector import YOUNG_THRESHOLD
        from ingest.debezium import DecoderConfig
        from ingest.kafka.options import parse_options
        from ingest.formats import SourceFormat
        from ingest.sink.plan import SinkPlan
        from ingest.sink.report import TaskReport
        from ingest.sink.task import write_task
        kafka = parse_options({"subscribe": "t", "kafka.bootstrap.servers": "127.0.0.1:1"})
        plan = SinkPlan(SourceFormat.DEBEZIUM, DecoderConfig(), {}, None, 0, "w", kafka)
        out["before"] = [gc.get_freeze_count(), gc.get_threshold()[0]]
        (row,) = write_task(iter([]), plan)  # a task given no ranges
        out["records"] = TaskReport.model_validate_json(row.column(0)[0].as_py()).records
        out["after"] = [gc.get_freeze_count() > 0, gc.get_threshold()[0] == YOUNG_THRESHOLD]
    """)
    assert out["before"][0] == 0
    assert out["records"] == 0
    assert out["after"] == [True, True]


def test_the_driver_hands_heap_and_thresholds_back_after_the_query() -> None:
    out = _run("""
        from ingest.collector import YOUNG_THRESHOLD, collector_for_batches
        before = gc.get_threshold()
        with collector_for_batches():
            out["during"] = [gc.get_freeze_count() > 0, gc.get_threshold()[0] == YOUNG_THRESHOLD]
        out["after"] = [gc.get_freeze_count(), gc.get_threshold() == before]
    """)
    assert out["during"] == [True, True]
    assert out["after"] == [0, True]


def test_a_process_that_froze_its_heap_itself_keeps_its_collector_as_it_was() -> None:
    out = _run("""
        from ingest.collector import collector_for_batches, tune_worker_collector
        gc.freeze()
        gc.set_threshold(5_000, 20, 30)
        frozen = gc.get_freeze_count()
        tune_worker_collector()
        with collector_for_batches():
            out["during"] = [gc.get_freeze_count() == frozen, gc.get_threshold()]
        out["after"] = [gc.get_freeze_count() == frozen, gc.get_threshold()]
    """)
    assert out["during"] == [True, [5_000, 20, 30]]
    assert out["after"] == [True, [5_000, 20, 30]]
