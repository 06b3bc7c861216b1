"""Deletion vectors as Iceberg v2 position-delete files, and the snapshot producer that adds them.

A data file with a deletion vector (issue 49) is published with one **position-delete file**
beside it: Parquet with ``file_path`` (field id 2147483546) and ``pos`` (2147483545), the rows
the vector marks, sorted by path then position (one data file per delete file, so by position),
the field ids stamped in the Parquet schema (``PARQUET:field_id``) as the Iceberg spec wants.
Iceberg v2 applies a position delete to the data files of its partition whose data sequence
number is not above its own, which is always the case here: a delete file is added in the
snapshot of its vector's version, never before its data file.

**Where**: ``<location>/metadata/deletes/``. Vacuum leaves ``metadata/`` alone (no commit row
names Iceberg's files, and they are not orphans: :mod:`catalog.maintenance.vacuum`), so a delete
file lives as long as the exporter wants it; under ``data/`` vacuum would take it for an orphan
and break the Iceberg snapshots naming it. The exporter deletes the delete files no remaining
snapshot names once it expired the snapshots that did (:func:`unnamed_delete_files`).

**Names are the vector's identity**: a hash of the data file's path and its
:class:`~catalog.model.VectorRef` (an inline blob, or an immutable vector file's byte range).
An unchanged vector therefore names the same delete file at the next version and the export
reuses it (no write, no manifest change); a changed vector is a new file, and the old one is
removed from the snapshot. Two exporters racing write the same bytes under the same name, and
only one of them commits (the pointer's compare-and-swap).

Manifests are written by pyiceberg's writers: its v2 manifest writer, told it holds deletes
(:class:`_DeleteManifestWriter`, ``ManifestContent.DELETES``), and its snapshot producer, whose
own producers (append, overwrite) write data manifests only (:class:`ExportFiles`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.manifest import (
    DataFile as IcebergDataFile,
)
from pyiceberg.manifest import (
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriter,
    ManifestWriterV2,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import Transaction
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _SnapshotProducer
from pyiceberg.typedef import Record

from catalog.files.storage import Storage
from catalog.files.vectors import load_vector, vector_positions
from catalog.model import DataFile

#: Where position-delete files live, relative to the table location (see the module doc).
DELETES_DIR = "metadata/deletes/"
#: Iceberg's reserved field ids of a position-delete file's columns.
FILE_PATH_ID = 2147483546
POS_ID = 2147483545
_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": str(FILE_PATH_ID)}),
        pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": str(POS_ID)}),
    ]
)


def delete_file_path(file: DataFile) -> str:
    """The delete file of ``file``'s current vector, relative to the table location."""
    assert file.vector is not None
    identity = f"{file.path}\0{file.vector.model_dump_json()}".encode()
    return f"{DELETES_DIR}{hashlib.sha256(identity).hexdigest()[:40]}-deletes.parquet"


def write_delete_file(storage: Storage, file: DataFile, data_path: str) -> tuple[str, int, int]:
    """Write ``file``'s vector as a position-delete file naming ``data_path`` (the absolute path
    the Iceberg data file entry carries); its relative path, size and row count."""
    assert file.vector is not None
    relative = delete_file_path(file)
    positions = vector_positions(load_vector(storage, file.vector)).astype("int64")
    table = pa.table(
        {"file_path": pa.array([data_path] * len(positions), pa.string()), "pos": positions},
        schema=_SCHEMA,
    )
    out = storage.open_output(relative)
    try:
        with pq.ParquetWriter(out.sink, _SCHEMA, compression="zstd") as writer:
            writer.write_table(table)
        size = out.commit()
    except BaseException:
        out.abort()
        raise
    return relative, size, len(positions)


def delete_file_entry(
    path: str, *, size: int, rows: int, data_path: str, partition: Record, spec: PartitionSpec
) -> IcebergDataFile:
    """The manifest entry of a position-delete file. Its ``file_path`` bounds both name the one
    data file it applies to, which is how readers (Java's, DuckDB's) skip it for the others."""
    bound = data_path.encode()
    entry = IcebergDataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=partition,
        record_count=rows,
        file_size_in_bytes=size,
        value_counts={FILE_PATH_ID: rows, POS_ID: rows},
        null_value_counts={FILE_PATH_ID: 0, POS_ID: 0},
        lower_bounds={FILE_PATH_ID: bound},
        upper_bounds={FILE_PATH_ID: bound},
        sort_order_id=None,
        equality_ids=None,
        key_metadata=None,
    )
    entry.spec_id = spec.spec_id
    return entry


class _DeleteManifestWriter(ManifestWriterV2):
    """pyiceberg's v2 manifest writer for a manifest of delete files (its own says ``data``)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class ExportFiles(_SnapshotProducer["ExportFiles"]):
    """One exported version: data files and position-delete files added and removed by path.

    pyiceberg's producers put every added file in a data manifest and rewrite the manifests they
    drop files from as data manifests; here added delete files get a delete manifest, and a
    manifest that loses files is rewritten with its own content (kept entries ``EXISTING``,
    dropped ones ``DELETED``). The summary is pyiceberg's, which counts delete files apart.
    """

    def __init__(
        self, transaction: Transaction, *, operation: Operation, properties: dict[str, str]
    ) -> None:
        super().__init__(
            operation=operation,
            transaction=transaction,
            io=transaction._table.io,
            snapshot_properties=properties,
        )

    def _validate_concurrency(self) -> None:
        """The export's commit is guarded by the pointer's compare-and-swap (no retries)."""

    def _deleted_entries(self) -> list[ManifestEntry]:
        return []  # recorded in the rewritten manifests (_carried)

    def _existing_manifests(self) -> list[ManifestFile]:
        return self._carried()

    def _manifests(self) -> list[ManifestFile]:
        spec = self._transaction.table_metadata.spec()
        added = [
            self._added(ManifestContent.DATA, spec, self._of(DataFileContent.DATA)),
            self._added(ManifestContent.DELETES, spec, self._of(DataFileContent.POSITION_DELETES)),
        ]
        return [m for m in added if m is not None] + self._carried()

    def _of(self, content: DataFileContent) -> list[IcebergDataFile]:
        return [f for f in self._added_data_files if f.content == content]

    def _writer(self, content: ManifestContent, spec: PartitionSpec) -> ManifestWriter:
        kind = _DeleteManifestWriter if content == ManifestContent.DELETES else ManifestWriterV2
        return kind(
            spec, self.schema(), self.new_manifest_output(), self._snapshot_id, self._compression
        )

    def _added(
        self, content: ManifestContent, spec: PartitionSpec, files: Sequence[IcebergDataFile]
    ) -> ManifestFile | None:
        if not files:
            return None
        with self._writer(content, spec) as writer:
            for file in files:
                writer.add_entry(
                    ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED,
                        snapshot_id=self._snapshot_id,
                        sequence_number=None,
                        file_sequence_number=None,
                        data_file=file,
                    )
                )
        return writer.to_manifest_file()

    def _carried(self) -> list[ManifestFile]:
        """The parent's manifests, those that lose files rewritten without them."""
        if self._parent_snapshot_id is None:
            return []
        parent = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id)
        assert parent is not None
        gone = {f.file_path for f in self._deleted_data_files}
        out: list[ManifestFile] = []
        for manifest in parent.manifests(self._io):
            entries = manifest.fetch_manifest_entry(self._io, discard_deleted=True)
            dropped = [e for e in entries if e.data_file.file_path in gone]
            if not entries:
                continue  # only deleted entries: nothing live to carry
            if not dropped:
                out.append(manifest)
                continue
            spec = self._transaction.table_metadata.specs()[manifest.partition_spec_id]
            with self._writer(manifest.content, spec) as writer:
                for entry in entries:
                    if entry.data_file.file_path in gone:
                        writer.delete(entry)
                    else:
                        writer.existing(entry)
            out.append(writer.to_manifest_file())
        return out


def named_delete_files(manifests: Iterable[ManifestFile], io: object) -> set[str]:
    """The delete files the given manifests name live (absolute paths)."""
    names: set[str] = set()
    for manifest in manifests:
        if manifest.content != ManifestContent.DELETES:
            continue
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):  # type: ignore[arg-type]
            names.add(entry.data_file.file_path)
    return names
