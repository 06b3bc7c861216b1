"""Fixtures live in small modules under tests/fixtures and are registered here."""

pytest_plugins = [
    "tests.fixtures.bytecode",
    "tests.fixtures.postgres",
    "tests.fixtures.broker",
    "tests.fixtures.connect",
    "tests.fixtures.spark",
    "tests.fixtures.spark_cluster",
    "tests.fixtures.outage",
    "tests.fixtures.s3",
]
