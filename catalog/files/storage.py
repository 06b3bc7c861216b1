"""The one seam through which lakestream touches data files: local disks and object stores alike.

A table location is a URI (``s3://bucket/prefix/ns/t-1a2b3c4d``, ``gs://...``, ``abfs://...``,
``hdfs://...``) or a local path (``/data/wh/...``, ``file:///data/wh/...``). :func:`storage_for`
turns it, with :class:`StorageOptions`, into a :class:`Storage`: a ``pyarrow.fs`` filesystem and
the root path in it. Every writer, reader, the compactor, DML and maintenance open, delete and
list files through it, so a new store needs no change anywhere else.

**Why no rename on object stores.** The catalog commit is the only commit point: a file no
commit names is invisible to every reader, whatever its name. So on an object store a file is
written under its final, unique name (``part-<uuid>.parquet``) in one upload - a rename there is a
copy plus a delete, twice the traffic and not atomic either - and an upload that fails is never
completed (an incomplete multipart upload is no object); what a failure may leave (the finished
files of a batch that failed later, or a file whose upload completed while its writer failed)
is an orphan no commit names, deleted by vacuum through this same seam. On a **local disk** files
are still written as a dot-named temporary, fsynced and renamed: there a reader could open a
half-written file by name (a tool listing the directory), and the rename is atomic and cheap.

**Credentials** come from the store's standard provider chain (for S3, the AWS SDK's:
environment, shared profile, web identity, instance metadata) unless :class:`StorageOptions`
holds explicit keys. They are never logged (``SecretStr``: repr and str mask them) and never
stored in the catalog, which stores the location URI only; options travel to Spark executors
inside the objects a task receives (pickled, never printed).

Filesystems are cached per (scheme, authority, options) in the process: creating an S3 client
costs milliseconds and opens a connection pool, and a merge read opens many files.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import os
import posixpath
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeAlias
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from catalog.errors import CatalogError
from catalog.files.layout import temp_name

#: Schemes of object stores and remote filesystems ``pyarrow.fs`` opens, by the name users write.
REMOTE_SCHEMES = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "hdfs", "viewfs"})
_LOCAL_SCHEMES = frozenset({"", "file"})
_BUCKET_SCHEMES = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss"})


class StorageError(CatalogError):
    """A warehouse or table location that cannot be used, or storage options that do not fit."""

    def __init__(self, message: str, *, location: str | None = None) -> None:
        super().__init__(message)
        self.location = location


class StorageOptions(BaseModel):
    """How to reach an object store; the defaults use the store's own provider chain.

    Only S3 (and S3-compatible stores: MinIO, Ceph, moto) reads these; gs://, abfs:// and hdfs://
    take credentials from their own chains (or the URI's query, as ``pyarrow.fs`` documents).
    Frozen and hashable: it keys the filesystem cache, and it is pickled to Spark executors.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    region: str | None = None
    endpoint: str | None = None
    """Endpoint override for S3-compatible stores, with its scheme: ``http://127.0.0.1:9000``."""
    path_style: bool = True
    """With an ``endpoint``: address buckets as ``endpoint/bucket/key`` (what most S3-compatible
    stores need) rather than ``bucket.endpoint/key``. AWS itself (no endpoint) is always
    addressed virtual-hosted style."""
    access_key: SecretStr | None = None
    secret_key: SecretStr | None = None
    session_token: SecretStr | None = None
    anonymous: bool = False
    """Unsigned requests (public buckets)."""
    connect_timeout: float | None = Field(default=None, gt=0)
    request_timeout: float | None = Field(default=None, gt=0)
    retry_attempts: int = Field(default=3, ge=1)
    """Attempts per request (the AWS SDK's standard retry strategy)."""


DEFAULT_STORAGE = StorageOptions()

#: Where a reader or writer finds a table's files: a :class:`Storage`, or a local path / URI
#: (opened with the default options: the store's own credential chain).
Location: TypeAlias = "str | os.PathLike[str] | Storage"


@dataclass(frozen=True)
class StoredFile:
    """A file found by :meth:`Storage.list_files`: path relative to the root, size, mtime."""

    path: str
    size: int
    modified: dt.datetime | None


class OutputFile(Protocol):
    """A file being written: a sink for ``pyarrow.parquet.ParquetWriter``, then commit or abort."""

    @property
    def sink(self) -> object: ...

    def tell(self) -> int: ...

    def commit(self) -> int:
        """Make the file visible under its final name; returns its size in bytes."""
        ...

    def abort(self) -> None:
        """Leave no file under the final name (best effort on object stores: see the module)."""
        ...


def parse_location(location: str | os.PathLike[str]) -> tuple[str, str]:
    """(scheme, what to open) of a location: ``("", local path)`` for a local path or a
    ``file://`` URI, ``(scheme, the URI)`` for a remote one. Nothing is contacted.

    Raises:
        StorageError: an unknown scheme, or an object-store URI without a bucket.
    """
    text = os.fspath(location)
    if "://" not in text:
        return "", text
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme in _LOCAL_SCHEMES:
        return "", parts.path
    if scheme not in REMOTE_SCHEMES:
        known = ", ".join(sorted(REMOTE_SCHEMES | {"file"}))
        raise StorageError(
            f"unknown storage scheme {scheme!r} in {redact_location(text)!r}; use one of {known}"
            " or a local path",
            location=redact_location(text),
        )
    if scheme in _BUCKET_SCHEMES and not parts.netloc:
        raise StorageError(
            f"{redact_location(text)!r} names no bucket: write {scheme}://bucket/prefix",
            location=redact_location(text),
        )
    return scheme, text


def redact_location(location: str) -> str:
    """A location fit for messages and logs: no user info and no query (either may hold keys)."""
    if "://" not in location:
        return location
    parts = urlsplit(location)
    host = parts.netloc.rsplit("@", 1)[-1]
    return f"{parts.scheme}://{host}{parts.path}"


def normalize_warehouse(warehouse: str | os.PathLike[str]) -> str:
    """The warehouse root as the catalog stores it: an absolute local path, or the URI itself
    without a trailing slash (and without user info or query: credentials never go there).

    Raises:
        StorageError: see :func:`parse_location`; also a URI carrying credentials.
    """
    scheme, rest = parse_location(warehouse)
    if not scheme:
        return str(Path(rest).expanduser().resolve())
    parts = urlsplit(rest)
    if "@" in parts.netloc or parts.query:
        raise StorageError(
            "a warehouse URI must not carry credentials or options (they would be stored in "
            "the catalog); pass them as storage options",
            location=redact_location(rest),
        )
    return rest.rstrip("/")


class Storage:
    """A table location on one filesystem: open, delete and list files by relative path."""

    def __init__(self, filesystem: pafs.FileSystem, root: str, uri: str) -> None:
        self.filesystem = filesystem
        self.root = root.rstrip("/") or root
        self.uri = uri
        self.local = isinstance(filesystem, pafs.LocalFileSystem)

    def __repr__(self) -> str:
        return f"Storage({redact_location(self.uri)!r})"

    def path(self, relative: str) -> str:
        """The path of a file in :attr:`filesystem` (what pyarrow's readers take)."""
        if self.local:
            return str(Path(self.root) / relative)
        return posixpath.join(self.root, relative)

    def uri_of(self, relative: str) -> str:
        """A URI (or local path) of a file that engines outside Python can open."""
        if self.local:
            return self.path(relative)
        return posixpath.join(self.uri.rstrip("/"), relative)

    def open_input(self, relative: str) -> pa.NativeFile:
        return self.filesystem.open_input_file(self.path(relative))

    def open_output(self, relative: str, *, fsync: bool = True) -> OutputFile:
        """A new file at ``relative``: visible under its name only after ``commit()``."""
        if self.local:
            return _LocalOutput(Path(self.path(relative)), fsync=fsync)
        return _RemoteOutput(self, relative)

    def delete(self, relative: str) -> bool:
        """Delete one file; False when it was not there."""
        try:
            self.filesystem.delete_file(self.path(relative))
        except FileNotFoundError:
            return False
        return True

    def discard(self, relatives: Iterable[str]) -> list[str]:
        """Delete files no commit will name (after a definite failure), best effort: returns
        those that could not be deleted (the store unreachable), orphans left to vacuum. Never
        raises, so the failure that led here is the one the caller sees."""
        left = []
        for relative in relatives:
            try:
                self.delete(relative)
            except OSError:
                left.append(relative)
        return left

    def exists(self, relative: str) -> bool:
        return self.size(relative) is not None

    def size(self, relative: str) -> int | None:
        """The file's size in bytes, or None when it is not there."""
        info = self.filesystem.get_file_info(self.path(relative))
        return info.size if info.type == pafs.FileType.File else None

    def list_files(self, prefix: str = "") -> Iterator[StoredFile]:
        """Every file under ``root/prefix``, recursively (vacuum's orphan listing)."""
        base = self.path(prefix) if prefix else self.root
        selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        for info in self.filesystem.get_file_info(selector):
            if info.type != pafs.FileType.File:
                continue
            relative = posixpath.relpath(Path(info.path).as_posix(), Path(self.root).as_posix())
            yield StoredFile(relative, int(info.size or 0), info.mtime)


class _LocalOutput:
    """Local disk: a dot-named temporary in the final folder, fsynced, renamed on commit."""

    def __init__(self, final: Path, *, fsync: bool) -> None:
        final.parent.mkdir(parents=True, exist_ok=True)
        self.final = final
        self.temp = final.with_name(temp_name(final.name))
        self.fsync = fsync
        self.file = open(self.temp, "wb")  # noqa: SIM115 - closed by commit/abort

    @property
    def sink(self) -> object:
        return self.file

    def tell(self) -> int:
        return self.file.tell()

    def commit(self) -> int:
        self.file.flush()
        if self.fsync:
            os.fsync(self.file.fileno())
        self.file.close()
        os.replace(self.temp, self.final)
        return self.final.stat().st_size

    def abort(self) -> None:
        self.file.close()
        self.temp.unlink(missing_ok=True)


class _RemoteOutput:
    """Object store: one upload under the final name, completed by ``close()`` on commit."""

    def __init__(self, storage: Storage, relative: str) -> None:
        self.storage = storage
        self.relative = relative
        self.stream = storage.filesystem.open_output_stream(storage.path(relative))

    @property
    def sink(self) -> pa.NativeFile:
        return self.stream

    def tell(self) -> int:
        return int(self.stream.tell())

    def commit(self) -> int:
        size = self.tell()
        self.stream.close()  # completes the upload: the object appears whole, or not at all
        return size

    def abort(self) -> None:
        # pyarrow's streams have no abort: closing completes the upload (of what was written),
        # so the object is deleted after; if the store is unreachable both fail and the object,
        # if any, is an orphan no commit names, for vacuum.
        with contextlib.suppress(OSError):
            self.stream.close()
        with contextlib.suppress(OSError):
            self.storage.delete(self.relative)


def storage_for(
    location: str | os.PathLike[str] | Storage, options: StorageOptions = DEFAULT_STORAGE
) -> Storage:
    """The :class:`Storage` of a table location (a Storage is returned as it is).

    Raises:
        StorageError: see :func:`parse_location`.
    """
    if isinstance(location, Storage):
        return location
    scheme, rest = parse_location(location)
    if not scheme:
        root = os.path.abspath(os.path.expanduser(rest))  # as the process sees it now
        return Storage(_local_filesystem(), root, root)
    parts = urlsplit(rest)
    if scheme in ("s3", "s3a"):
        return Storage(_s3(options), f"{parts.netloc}{parts.path}", rest)
    filesystem, root = _from_uri(rest)
    return Storage(filesystem, root, rest)


@functools.cache
def _local_filesystem() -> pafs.LocalFileSystem:
    return pafs.LocalFileSystem()


@functools.lru_cache(maxsize=32)
def _s3(options: StorageOptions) -> pafs.S3FileSystem:
    endpoint = urlsplit(options.endpoint) if options.endpoint else None
    if endpoint is not None and not (endpoint.scheme and endpoint.netloc):
        raise StorageError("storage endpoint must be a URL with a scheme: http://host:port")
    return pafs.S3FileSystem(
        access_key=_secret(options.access_key),
        secret_key=_secret(options.secret_key),
        session_token=_secret(options.session_token),
        anonymous=options.anonymous,
        region=options.region,
        scheme=endpoint.scheme if endpoint else "https",
        endpoint_override=endpoint.netloc if endpoint else None,
        force_virtual_addressing=endpoint is not None and not options.path_style,
        connect_timeout=options.connect_timeout,
        request_timeout=options.request_timeout,
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=options.retry_attempts),
    )


@functools.lru_cache(maxsize=64)
def _from_uri(uri: str) -> tuple[pafs.FileSystem, str]:
    """gs://, abfs://, hdfs://: pyarrow's own parsing (credentials from their chains)."""
    try:
        filesystem, root = pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
        raise StorageError(
            f"cannot open {redact_location(uri)!r}: {exc}", location=redact_location(uri)
        ) from None
    return filesystem, root


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None
