"""Parquet data-file IO of lakestream tables, independent of any engine.

* :mod:`~catalog.files.bucketing` - primary key -> hash bucket (Iceberg's murmur3 bucket hash).
* :mod:`~catalog.files.layout` - where files live under a table location.
* :mod:`~catalog.files.writer` - write Arrow data as Parquet files described as DataFiles;
  prepare the content of a CDC merge-run file.
* :mod:`~catalog.files.stats` - column statistics and their JSON-safe encoding.
* :mod:`~catalog.files.reader` - plain scans and merge-on-read of CDC buckets.
* :mod:`~catalog.files.merge` - the vectorised "last change per key wins" kernel.
* :mod:`~catalog.files.evolution` - schema change rules, reading old files under a new schema.
* :mod:`~catalog.files.pruning` - simple predicates and file pruning by statistics.
* :mod:`~catalog.files.storage` - the one filesystem seam: local disks and object stores.
* :mod:`~catalog.files.vectors` - deletion vectors: blob bytes, inline or Puffin vector files.
"""

from catalog.files.bucketing import bucket_ids, key_hashes, split_by_bucket
from catalog.files.evolution import (
    Change,
    ChangeKind,
    align_to_schema,
    check_evolution,
    is_widening,
    require_allowed,
)
from catalog.files.layout import new_data_file_path, partition_path
from catalog.files.merge import last_change_per_key, merge_runs
from catalog.files.partial import has_partial_rows, take_filled
from catalog.files.pruning import Op, Predicate, may_contain, may_match, to_expression
from catalog.files.reader import (
    RowFilter,
    read_files,
    read_merged,
    read_merged_buckets,
    read_tail_group,
    read_whole_files,
)
from catalog.files.stats import column_stats, decode_stat, encode_stat
from catalog.files.storage import (
    DEFAULT_STORAGE,
    Location,
    Storage,
    StorageError,
    StorageOptions,
    StoredFile,
    storage_for,
)
from catalog.files.vectors import (
    VectorFormatError,
    VectorsNotReadableError,
    decode_vector,
    encode_vector,
    inline_max_bytes,
    load_vector,
    store_vectors,
    vector_positions,
)
from catalog.files.writer import (
    WriteOptions,
    prepare_merge_run,
    write_data_file,
    write_data_files,
    write_merge_run,
)

__all__ = [
    "DEFAULT_STORAGE",
    "Location",
    "Storage",
    "StorageError",
    "StorageOptions",
    "StoredFile",
    "storage_for",
    "VectorFormatError",
    "VectorsNotReadableError",
    "decode_vector",
    "encode_vector",
    "inline_max_bytes",
    "load_vector",
    "store_vectors",
    "vector_positions",
    "Change",
    "Op",
    "ChangeKind",
    "Predicate",
    "RowFilter",
    "WriteOptions",
    "align_to_schema",
    "bucket_ids",
    "check_evolution",
    "column_stats",
    "decode_stat",
    "encode_stat",
    "is_widening",
    "key_hashes",
    "has_partial_rows",
    "last_change_per_key",
    "may_contain",
    "may_match",
    "merge_runs",
    "new_data_file_path",
    "partition_path",
    "prepare_merge_run",
    "read_files",
    "read_merged",
    "read_merged_buckets",
    "read_tail_group",
    "read_whole_files",
    "require_allowed",
    "split_by_bucket",
    "take_filled",
    "to_expression",
    "write_data_file",
    "write_data_files",
    "write_merge_run",
]
