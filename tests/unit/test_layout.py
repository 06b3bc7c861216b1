"""The tests' layout rule (CONTRIBUTING.md), checked so that it stays a rule:

* ``tests/unit/<dir>/…`` mirrors a folder of the project (``tests/unit/catalog/files`` tests
  ``catalog/files``); project-wide unit tests sit directly in ``tests/unit``;
* ``tests/integration/<capability>/…`` holds the tests that need real services;
* helpers shared by several test folders live in ``tests/fixtures``; a folder's own helpers are
  named ``support.py``; every folder is a package, so imports never depend on ``sys.path``;
* benchmarks live in ``bench/``, never among the tests.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
OWN_HELPERS = {"__init__.py", "conftest.py", "support.py"}


def _folders() -> list[Path]:
    return [
        p
        for p in TESTS.rglob("*")
        if p.is_dir() and p.name != "__pycache__" and any(p.glob("*.py"))
    ]


def test_every_test_folder_is_a_package() -> None:
    missing = [str(p.relative_to(ROOT)) for p in _folders() if not (p / "__init__.py").exists()]
    assert missing == []


def test_unit_test_folders_mirror_the_project() -> None:
    unit = TESTS / "unit"
    strays = [
        str(p.relative_to(ROOT))
        for p in _folders()
        if p.is_relative_to(unit) and p != unit and not (ROOT / p.relative_to(unit)).is_dir()
    ]
    assert strays == []


def test_only_tests_and_named_helpers_sit_among_the_tests() -> None:
    strays = [
        str(p.relative_to(ROOT))
        for p in TESTS.rglob("*.py")
        if "fixtures" not in p.parts
        and p.parent != TESTS
        and not p.name.startswith("test_")
        and p.name not in OWN_HELPERS
    ]
    assert strays == []
