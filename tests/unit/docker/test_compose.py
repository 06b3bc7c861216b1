"""docker/: what a user with Docker relies on, checked without a Docker engine.

* every image is an exact release, so `docker compose up` next month runs what was checked;
* Kafka Connect's env config provider really is restricted to ``SOURCE_DB_*``: the key is the
  one ``EnvVarConfigProvider`` reads (``allowlist.pattern``, Kafka 3.5+) and its pattern is
  matched against the whole variable name (``Matcher.matches()``);
* the compactor service runs the ``lakestream compactor`` command the CLI really has;
* the smoke script parses;
* the Spark cluster variants (``compose.spark.yaml``, ``k8s/``) submit the CLI's own file from
  where the image installs it, with arguments the CLI takes, ``spark.master: null``, and the
  warehouse mounted where the executors write it.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from jobs.cli import app

DOCKER = Path(__file__).resolve().parents[3] / "docker"

#: Tags that name one release, per image repository. A major-only or major.minor-only tag
#: (``postgres:16``, ``python:3.11-slim``, ``debezium/connect:3.0``) and ``latest`` move to
#: new releases; these do not. PostgreSQL's releases are MAJOR.MINOR since version 10, so
#: ``16.6`` is exact. A new image needs its pattern here.
EXACT_TAGS: dict[str, str] = {
    "postgres": r"\d+\.\d+(-[a-z]+)?",
    "python": r"\d+\.\d+\.\d+(-[a-z]+)*",
    "apache/kafka": r"\d+\.\d+\.\d+",
    "quay.io/debezium/connect": r"\d+\.\d+\.\d+\.Final",
    "debezium/connect": r"\d+\.\d+\.\d+\.Final",
    "curlimages/curl": r"\d+\.\d+\.\d+",
    "apache/spark": r"\d+\.\d+\.\d+(-[a-z0-9.]+)*",
    "quay.io/apicurio/apicurio-registry": r"\d+\.\d+\.\d+",
}

#: Where the Debezium image turns CONNECT_* variables into worker properties, and the
#: provider's own key (org.apache.kafka.common.config.provider.EnvVarConfigProvider).
PROVIDER_PARAM_PREFIX = "config.providers.env.param."
ALLOWLIST_KEY = "allowlist.pattern"

_DEFAULTED = re.compile(r"\$\{(\w+):-([^}]*)\}")


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    return loaded


def services() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose()["services"]
    return found


def with_defaults(text: str) -> str:
    """``${VAR:-default}`` as Compose resolves it when VAR is unset (no docker/.env)."""
    return _DEFAULTED.sub(lambda m: m.group(2), text)


def is_exact(image: str) -> bool:
    if "@sha256:" in image:
        return True
    repository, _, tag = image.rpartition(":")
    if not repository or "/" in tag:  # no tag at all: that is `latest`
        return False
    pattern = EXACT_TAGS.get(repository)
    return pattern is not None and re.fullmatch(pattern, tag) is not None


def pulled_images() -> dict[str, str]:
    """Service -> image, for services that pull theirs (the others build it from this repo)."""
    return {
        name: with_defaults(svc["image"]) for name, svc in services().items() if "build" not in svc
    }


def dockerfile_bases(path: Path = DOCKER / "Dockerfile") -> list[str]:
    text = path.read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.MULTILINE))
    bases = re.findall(r"^FROM (\S+)", text, re.MULTILINE)
    resolved = [re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], b) for b in bases]
    stages = set(re.findall(r"^FROM \S+ AS (\S+)", text, re.MULTILINE))
    return [b for b in resolved if b not in stages]


@pytest.mark.parametrize(
    "image",
    [
        "postgres:16",
        "postgres:latest",
        "postgres",
        "python:3.11-slim-bookworm",
        "quay.io/debezium/connect:3.0",
        "apache/kafka:3.9",
        "curlimages/curl:8",
        "unknown/image:1.2.3",
    ],
)
def test_the_rule_refuses_moving_tags(image: str) -> None:
    assert not is_exact(image)


def test_every_pulled_image_is_an_exact_release() -> None:
    images = pulled_images()
    assert {"postgres-catalog", "postgres-source", "kafka", "connect"} <= images.keys()
    moving = {name: image for name, image in images.items() if not is_exact(image)}
    assert moving == {}


def test_the_lakestream_image_builds_from_an_exact_python_release() -> None:
    bases = dockerfile_bases()
    assert bases, "docker/Dockerfile names no base image"
    assert [b for b in bases if not is_exact(b)] == []


def test_env_example_does_not_unpin_what_compose_pins() -> None:
    """Copying .env.example to .env must keep the same versions as the compose defaults."""
    example = dict(
        line.split("=", 1)
        for line in (DOCKER / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    defaults = {
        var: default
        for svc in services().values()
        if "build" not in svc
        for var, default in _DEFAULTED.findall(svc["image"])
    }
    assert defaults, "the images' versions are no longer compose variables"
    assert {var: example.get(var) for var in defaults} == defaults


def connect_properties() -> dict[str, str]:
    """The Connect worker's properties from CONNECT_* variables, as the Debezium image maps
    them (docker-entrypoint.sh: strip CONNECT_, lower case, ``_`` -> ``.``)."""
    env = services()["connect"]["environment"]
    return {
        key.removeprefix("CONNECT_").lower().replace("_", "."): str(value)
        for key, value in env.items()
        if key.startswith("CONNECT_")
    }


def test_env_provider_is_restricted_with_the_key_kafka_reads() -> None:
    props = connect_properties()
    assert props["config.providers"] == "env"
    assert props["config.providers.env.class"] == (
        "org.apache.kafka.common.config.provider.EnvVarConfigProvider"
    )
    params = {
        k.removeprefix(PROVIDER_PARAM_PREFIX) for k in props if k.startswith(PROVIDER_PARAM_PREFIX)
    }
    assert params == {ALLOWLIST_KEY}


def test_the_allowlist_admits_what_the_connector_reads_and_nothing_else() -> None:
    allow = re.compile(connect_properties()[PROVIDER_PARAM_PREFIX + ALLOWLIST_KEY])
    connector = json.loads((DOCKER / "connector.json").read_text())
    referenced = set(re.findall(r"\$\{env:(\w+)\}", json.dumps(connector)))
    worker_env = set(services()["connect"]["environment"])
    assert referenced, "connector.json reads no variables through the provider any more"
    assert referenced <= worker_env
    # Java's Matcher.matches() is a whole-name match, as re.fullmatch
    assert all(allow.fullmatch(name) for name in referenced)
    others = {"PATH", "HOME", "KAFKA_HEAP_OPTS", "CATALOG_DB_PASSWORD", "PGPASSWORD"}
    others |= {name for name in worker_env if not name.startswith("SOURCE_DB_")}
    assert [name for name in others if allow.fullmatch(name)] == []


def assert_cli_accepts(args: list[str]) -> None:
    """The real ``lakestream`` CLI knows the command and its options: parsed with ``--help``
    appended, so nothing runs. A renamed command or an unknown option exits 2."""
    result = CliRunner().invoke(app, [*args, "--help"])
    assert result.exit_code == 0, result.output


def test_the_compactor_service_runs_the_compactor_command() -> None:
    compactor = services()["compactor"]
    command = compactor["command"]
    assert command[:2] == ["compactor", "run"]
    assert_cli_accepts(command)
    # the healthcheck asks the port the command serves /healthz on
    port = command[command.index("--metrics-port") + 1]
    assert f":{port}/healthz" in " ".join(compactor["healthcheck"]["test"])
    # it rewrites the files the ingest job writes: the same warehouse volume
    assert "warehouse:/data/warehouse" in compactor["volumes"]
    assert "warehouse:/data/warehouse" in services()["ingest"]["volumes"]
    worker = services()["compactor-worker"]["command"]
    assert worker == ["compactor", "worker"]
    assert_cli_accepts(worker)


def test_the_image_runs_lakestream_as_its_entrypoint() -> None:
    """Compose's ``command:`` lists are arguments to the image's `lakestream` entrypoint."""
    dockerfile = (DOCKER / "Dockerfile").read_text()
    runtime = dockerfile.split("AS runtime", 1)[1]
    assert 'ENTRYPOINT ["lakestream"]' in runtime


def test_smoke_script_parses_and_is_executable() -> None:
    script = DOCKER / "smoke.sh"
    result = subprocess.run(
        ["bash", "-n", str(script)], check=False, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert script.stat().st_mode & 0o111


# -- the ingest job on a Spark cluster ------------------------------------------------------------

SPARK_OVERRIDE = DOCKER / "compose.spark.yaml"
K8S_JOB = DOCKER / "k8s" / "ingest-job.yaml"
K8S_DOCKERFILE = DOCKER / "k8s" / "Dockerfile"


def spark_services() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = yaml.safe_load(SPARK_OVERRIDE.read_text())["services"]
    return found


def installed_cli() -> str:
    """Where the lakestream image installs ``jobs/cli.py``: its virtualenv, its Python."""
    base = dict(re.findall(r"^ARG (\w+)=(\S+)$", (DOCKER / "Dockerfile").read_text(), re.M))
    version = re.match(r"python:(\d+\.\d+)\.", base["PYTHON_IMAGE"])
    assert version is not None
    return f"/opt/lakestream/venv/lib/python{version.group(1)}/site-packages/jobs/cli.py"


def submitted(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """spark-submit's ``--conf``s and options, and the application's arguments (after its file)."""
    app_at = argv.index(installed_cli())
    options, conf = argv[:app_at], {}
    for i, arg in enumerate(options):
        if arg == "--conf":
            key, _, value = options[i + 1].partition("=")
            conf[key] = value
        elif arg.startswith("--") and i + 1 < len(options):
            conf[arg] = options[i + 1]
    return conf, argv[app_at + 1 :]


def test_the_spark_override_runs_every_node_on_the_lakestream_image() -> None:
    """Same Python, PySpark and lakestream on driver and executors: nothing pulled."""
    image = services()["ingest"]["image"]
    spark = spark_services()
    assert {name: svc.get("image", image) for name, svc in spark.items()} == dict.fromkeys(
        spark, image
    )


def test_the_spark_override_submits_the_ingest_job_to_its_master() -> None:
    spark = spark_services()
    master = spark["spark-master"]["command"]
    assert master[0] == "org.apache.spark.deploy.master.Master"
    url = f"spark://{master[master.index('--host') + 1]}:{master[master.index('--port') + 1]}"
    worker = spark["spark-worker"]["command"]
    assert worker[:2] == ["org.apache.spark.deploy.worker.Worker", url]
    ingest = spark["ingest"]
    assert ingest["entrypoint"] == ["spark-submit"]
    conf, app_args = submitted(ingest["command"])
    assert conf["--master"] == url
    assert conf["spark.driver.host"] == "ingest"  # the service name the executors resolve
    assert_cli_accepts(app_args)
    assert app_args[:2] == services()["ingest"]["command"][:2]
    assert json.loads(ingest["environment"]["LAKESTREAM_INGEST__SPARK"])["master"] is None


def test_the_workers_write_the_warehouse_the_driver_names() -> None:
    assert "warehouse:/data/warehouse" in spark_services()["spark-worker"]["volumes"]
    assert yaml.safe_load((DOCKER / "ingest.yaml").read_text())["catalog"]["warehouse"] == (
        "/data/warehouse"
    )


def k8s_documents() -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(K8S_JOB.read_text()) if doc}


def test_the_k8s_job_submits_the_ingest_job_to_kubernetes() -> None:
    docs = k8s_documents()
    container = docs["Job"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["spark-submit"]
    conf, app_args = submitted(container["args"])
    assert conf["--master"].startswith("k8s://https://")
    assert conf["--deploy-mode"] == "client"
    assert conf["spark.kubernetes.container.image"] == container["image"]
    assert_cli_accepts(app_args)
    config = yaml.safe_load(docs["ConfigMap"]["data"]["ingest.yaml"])
    assert config["spark"]["master"] is None
    prefix = "spark.kubernetes.executor.volumes.persistentVolumeClaim.warehouse."
    assert conf[prefix + "mount.path"] == config["catalog"]["warehouse"]
    claim = conf[prefix + "options.claimName"]
    claims = [
        d for d in yaml.safe_load_all(K8S_JOB.read_text()) if d["kind"] == "PersistentVolumeClaim"
    ]
    assert {"ReadWriteMany"} == {
        m for c in claims if c["metadata"]["name"] == claim for m in c["spec"]["accessModes"]
    }


def test_the_k8s_image_takes_sparks_entrypoint_from_an_exact_release() -> None:
    bases = dockerfile_bases(K8S_DOCKERFILE)
    spark = [b for b in bases if b.startswith("apache/spark:")]
    assert spark and all(is_exact(b) for b in spark)
    text = K8S_DOCKERFILE.read_text()
    assert 'ENTRYPOINT ["/opt/entrypoint.sh"]' in text
    assert f"ENV SPARK_HOME={installed_cli().removesuffix('jobs/cli.py')}pyspark" in text
