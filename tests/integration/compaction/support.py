"""Helpers of the compaction tests that read CDC buckets the way the resolver's contract allows
while readers still mask vectors before merging (docs/design/deletion-vectors.md, D6)."""

from __future__ import annotations

import textwrap
from typing import Any

from catalog import Table
from catalog.files import read_merged
from tests.fixtures.compaction import rows_at

#: A worker process that claims one task, writes its outputs, prepares its commit and is
#: killed (SIGKILL) before publishing it.
DOOMED_WORKER = textwrap.dedent("""
    import datetime as dt, os, signal, sys
    from catalog import Catalog
    from catalog.committer import _Publication
    from compaction.queue import QueueSettings, TaskQueue
    from compaction.worker import Worker, WorkerSettings

    def dies_before_publishing(self, plans):
        # the outputs are written and their commit rows prepared; the process dies before it
        # publishes, as a kill -9 or a lost host would leave it
        os.kill(os.getpid(), signal.SIGKILL)

    _Publication._decision = dies_before_publishing
    cat = Catalog.connect(sys.argv[1], warehouse=sys.argv[2])
    queue = TaskQueue(cat.store, QueueSettings(lease=dt.timedelta(seconds=1)))
    Worker(cat, queue, worker_id="doomed", settings=WorkerSettings(drain=True)).run()
""")


def merged_rows(table: Table, version: int | None = None) -> list[tuple[Any, ...]]:
    """Every row of a CDC table at ``version``, each bucket merged whole IGNORING its vectors
    (always correct: every mark a resolver writes is a row the merge drops anyway)."""
    table.refresh()
    meta = table.meta
    columns = meta.user_schema.names
    rows: list[tuple[Any, ...]] = []
    for part in table.plan(version=version).partitions:
        for batch in read_merged(
            meta.files,
            [f.path for f in part.files],  # paths carry no vector
            meta.schema,
            meta.primary_key,
            sequence_column=meta.sequence_column,
            columns=columns,
        ):
            rows += [tuple(r[c] for c in columns) for r in batch.to_pylist()]
    return sorted(rows, key=repr)


def reads(table: Table, version: int | None = None) -> list[tuple[Any, ...]]:
    """The table's rows through the merge path, after checking that the table's own reader
    agrees with it where it must: a bucket without pending runs, or a table without a
    sequence column (only a masked tombstone behind an older pending replay differs)."""
    merged = merged_rows(table, version)
    if table.meta.sequence_column is None:
        assert sorted(rows_at(table, version), key=repr) == merged
    return merged
