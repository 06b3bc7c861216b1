"""The transactions benchmark's report: the ratio of the medians and, per component, the CPU
a consistent run used over an eventual one (what moves less than events/s between runs)."""

from __future__ import annotations

import argparse

from bench.ingest.transactions import Run, report
from ingest.transactions import TransactionMode

C, E = TransactionMode.CONSISTENT, TransactionMode.EVENTUAL
ARGS = argparse.Namespace(
    events=1000, keys=100, max_offsets=250, buckets=4, warmup_events=1000, transaction_partitions=1
)


def run(mode: TransactionMode, seconds: float, driver: float, workers: float) -> Run:
    cpu = {"driver": driver, "jvm": 4.0, "python workers": workers, "broker": 2.0, "other": 0.0}
    return Run(mode, 0, seconds, 1000, 5, cpu)


def test_the_report_gives_the_ratio_of_medians_and_the_cpu_over_eventual() -> None:
    runs = [
        run(E, 1.0, 0.1, 12.0),
        run(C, 1.25, 1.5, 13.0),
        run(C, 1.0, 1.3, 13.4),
        run(E, 0.8, 0.3, 11.0),
        run(C, 2.0, 1.4, 14.0),
        run(E, 1.0, 0.2, 11.5),
    ]

    text = report(runs, ARGS, (1.0, 1.0, 1.0)).splitlines()

    assert "median consistent: 800 events/s" in text
    assert "median eventual: 1,000 events/s" in text
    assert "consistent / eventual: 0.80x (goal >= 0.9x)" in text
    assert text[-1] == (
        "CPU s of consistent over eventual (medians): "
        "driver +1.2, jvm +0.0, python workers +1.9, broker +0.0"
    )


def test_one_mode_alone_has_no_ratio_and_no_cpu_comparison() -> None:
    text = report([run(C, 1.0, 1.4, 13.0)], ARGS, (1.0, 1.0, 1.0))
    assert "consistent / eventual" not in text and "over eventual" not in text
