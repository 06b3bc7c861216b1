#!/usr/bin/env bash
# Smoke test of the Docker Compose stack, for a machine with Docker: build the images, bring the
# whole pipeline up, insert rows into the source database, and wait until a read through the
# catalog returns them from the lake. Then tear everything down (volumes included) unless --keep.
#
#   docker/smoke.sh                # from anywhere; about 5-10 minutes the first time (the build)
#   docker/smoke.sh --keep         # leave the stack running afterwards to look around
#   docker/smoke.sh --no-build --timeout 900
#
# It runs as its own Compose project (lakestream-smoke: its own containers and volumes) on its
# own host ports, so a stack started by hand with `docker compose -f docker/compose.yaml up` is
# left alone. Exit code 0: the rows arrived; 1: they did not within the timeout (the ingest and
# connector logs are printed); 2: bad usage or no Docker Compose v2.
set -euo pipefail

usage() {
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

keep=false
build=true
timeout_s=600
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=true ;;
    --no-build) build=false ;;
    --timeout)
      [ $# -ge 2 ] || usage
      timeout_s=$2
      shift
      ;;
    -h | --help) usage ;;
    *)
      echo "smoke: unknown argument $1" >&2
      usage
      ;;
  esac
  shift
done
case "$timeout_s" in '' | *[!0-9]*) echo "smoke: --timeout takes seconds" >&2; exit 2 ;; esac

here=$(cd "$(dirname "$0")" && pwd)
project=${SMOKE_PROJECT:-lakestream-smoke}
# Host ports of this project, away from the defaults of a hand-started stack.
export CATALOG_DB_PORT=${SMOKE_CATALOG_DB_PORT:-15433}
export SOURCE_DB_PORT=${SMOKE_SOURCE_DB_PORT:-15434}
export KAFKA_HOST_PORT=${SMOKE_KAFKA_HOST_PORT:-39092}
export CONNECT_PORT=${SMOKE_CONNECT_PORT:-18083}
export COMPACTOR_METRICS_PORT=${SMOKE_COMPACTOR_METRICS_PORT:-19108}

compose() { docker compose -p "$project" -f "$here/compose.yaml" "$@"; }
say() { echo "smoke: $*"; }

docker compose version >/dev/null 2>&1 || {
  echo "smoke: needs Docker with the Compose v2 plugin (docker compose version failed)" >&2
  exit 2
}

# shellcheck disable=SC2329  # invoked by the EXIT trap
teardown() {
  if [ "$keep" = true ]; then
    say "stack kept; remove it with: docker compose -p $project -f $here/compose.yaml down -v"
  else
    say "tearing down project $project (containers and volumes)"
    compose --profile tools down -v --remove-orphans >/dev/null 2>&1 || true
  fi
}
trap teardown EXIT
trap 'exit 130' INT TERM

deadline=$(($(date +%s) + timeout_s))
in_time() { [ "$(date +%s)" -lt "$deadline" ]; }

if [ "$build" = true ]; then
  say "building the lakestream images"
  compose --profile tools build   # the runtime image and the small query image
fi
say "starting project $project"
compose up -d

# Rows no earlier run can have produced: this run's marker in the region column.
marker="smoke-$(date +%s)-$$"
rows=3
insert_sql="INSERT INTO shop.orders (customer_id, region, total)
            SELECT 1 + n % 5, '$marker', 10 + n FROM generate_series(1, $rows) AS n;"

say "inserting $rows orders with region '$marker' into the source"
# shellcheck disable=SC2016  # $POSTGRES_USER and $1 expand inside the container's shell
until compose exec -T postgres-source sh -c \
  'psql -q -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" -c "$1"' sh "$insert_sql" \
  >/dev/null 2>&1; do
  in_time || { echo "smoke: the source database did not accept the insert in time" >&2; exit 1; }
  sleep 3
done

# A read through the catalog (merge-on-read of the CDC table) in the query image: how many rows
# carry the marker. Prints -1 while the table does not exist yet.
count_py="
import os, sys
from catalog import Catalog
try:
    cat = Catalog.connect(os.environ['LAKESTREAM_CATALOG__DSN'], create=False)
    table = cat.load_table('shop.orders')
except Exception as exc:
    print(-1, type(exc).__name__)
    sys.exit(0)
print(table.scan(filter=[('region', '=', sys.argv[1])]).to_arrow().num_rows)
"

say "waiting up to ${timeout_s}s (from start) for them in the lake table shop.orders"
seen=""
while in_time; do
  seen=$(compose --profile tools run --rm --no-deps -T query -c "$count_py" "$marker" 2>/dev/null \
    | tail -n 1 || true)
  if [ "${seen%% *}" = "$rows" ]; then
    say "found all $rows rows in shop.orders through the catalog"
    compose run --rm --no-deps -T catalog-init tables history shop.orders | tail -n 5 || true
    say "OK"
    exit 0
  fi
  say "lake has ${seen:-nothing yet}; waiting"
  sleep 10
done

echo "smoke: the rows did not reach the lake within ${timeout_s}s (last answer: ${seen:-none})" >&2
compose ps >&2 || true
for service in register-connector ingest; do
  echo "--- last lines of $service" >&2
  compose logs --no-color --tail 40 "$service" >&2 || true
done
exit 1
