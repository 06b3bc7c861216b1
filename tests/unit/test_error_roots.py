"""Every error class of a package derives from the package's root and the catalog's and the
compactor's are exported, so a caller catches one type per package (issue 11)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

import catalog
import compaction
import ingest
from catalog import CatalogError
from compaction import CompactionError
from ingest import IngestError

ROOTS: dict[ModuleType, type[Exception]] = {
    catalog: CatalogError,
    ingest: IngestError,
    compaction: CompactionError,
}


def error_classes(package: ModuleType) -> dict[str, type[BaseException]]:
    """The public exception classes defined in the package's modules (spark_read's included)."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not name.startswith("_")
            ):
                found[f"{module.__name__}.{name}"] = value
    return found


@pytest.mark.parametrize("package", list(ROOTS), ids=lambda p: p.__name__)
def test_every_error_derives_from_the_package_root(package: ModuleType):
    classes = error_classes(package)
    assert classes
    assert {n for n, c in classes.items() if not issubclass(c, ROOTS[package])} == set()


@pytest.mark.parametrize("package", [catalog, compaction], ids=lambda p: p.__name__)
def test_every_error_is_exported_from_the_package(package: ModuleType):
    exported = {getattr(package, n) for n in package.__all__}
    missing = {n for n, c in error_classes(package).items() if c not in exported}
    assert missing == set()


def test_the_spark_readers_errors_are_ingest_errors_exported_lazily():
    assert issubclass(ingest.SparkReadError, IngestError)
    assert issubclass(ingest.ReadOptionError, ingest.SparkReadError)
