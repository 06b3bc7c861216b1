"""What a ``lakestream`` command loads before it runs.

Every call pays its imports: scripts that call the CLI in a loop, health probes, the tests'
own ~150 calls. A catalog command needs the catalog and its settings; the ingest and
compaction packages, pandas (which ``pyarrow.dataset`` pulls in) and pyspark load only when a
command that uses them runs.
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("pandas", "pyarrow.dataset", "pyspark", "ingest", "compaction", "prometheus_client")

PROBE = f"""
import json, sys
{{}}
print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))
"""


def loaded_after(statement: str) -> list[str]:
    """The heavy modules a fresh interpreter holds after ``statement``."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(statement)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_command_line_loads_only_the_catalog_until_a_command_needs_more():
    assert loaded_after("import jobs.cli") == []


def test_the_catalog_loads_pyarrow_dataset_only_for_a_scan_that_needs_it():
    assert loaded_after("import catalog") == []


def test_a_failure_finds_its_exit_code_though_its_package_loaded_after_the_cli():
    from compaction.policy import InvalidPolicyError
    from ingest.errors import IngestError
    from jobs.cli import EXIT_FAILED, EXIT_USAGE, explain
    from jobs.table_compact import UsageError

    bad_property = InvalidPolicyError(property="p", value="x", table=None, expected="a size")
    assert explain(IngestError("the broker went away")) == (EXIT_FAILED, "the broker went away")
    assert explain(bad_property)[0] == EXIT_USAGE
    assert explain(UsageError("name the tables")) == (EXIT_USAGE, "name the tables")


def test_an_ingest_file_with_an_unknown_key_is_named_before_a_missing_kafka_client(tmp_path):
    """On an install without the Spark extra, a mistake in the file is still the first thing
    the user hears about: the key, exit code 2 (issue 48)."""
    config = tmp_path / "ingest.yaml"
    config.write_text(
        "job: shop\ncatalog: {dsn: 'postgresql://u@127.0.0.1:1/x'}\n"
        "kafka: {bootstrap_servers: '127.0.0.1:1'}\nsource: {topics: [a.b.c]}\n"
        "checkpoint: /tmp/x\ntransactionz: consistent\n"
    )
    hide_extras = (
        "import sys; sys.modules['confluent_kafka'] = None; sys.modules['pyspark'] = None; "
        f"from jobs.cli import main; sys.exit(main(['ingest', '--config', {str(config)!r}]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", hide_extras], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "transactionz" in lines[0], lines
    assert "not installed" not in lines[0]
