#!/bin/sh
# Create or update the Debezium connector from connector.json, then wait until the connector and
# its task run. Run by the one-shot `register-connector` service of docker/compose.yaml (in the
# curlimages/curl image: busybox sh, curl, grep); safe to run again.
#
# PUT /connectors/NAME/config creates the connector or updates its config, so a second
# `docker compose up` does not fail the way a repeated POST /connectors would (409 Conflict).
set -eu

CONNECT_URL="${CONNECT_URL:-http://connect:8083}"
CONNECTOR_NAME="${CONNECTOR_NAME:-lakestream-shop}"
CONFIG_FILE="${CONFIG_FILE:-/etc/lakestream/connector.json}"
WAIT_SECONDS="${WAIT_SECONDS:-120}"

url="$CONNECT_URL/connectors/$CONNECTOR_NAME"

echo "registering connector $CONNECTOR_NAME at $CONNECT_URL"
response=$(curl -sS -X PUT -H "Content-Type: application/json" \
    --data "@$CONFIG_FILE" -w '\n%{http_code}' "$url/config")
code=$(printf '%s\n' "$response" | tail -n 1)
case "$code" in
    200 | 201) echo "connector config accepted (HTTP $code)" ;;
    *)
        echo "connector config refused (HTTP $code):" >&2
        printf '%s\n' "$response" | sed '$d' >&2
        exit 1
        ;;
esac

waited=0
while [ "$waited" -lt "$WAIT_SECONDS" ]; do
    status=$(curl -fsS "$url/status" || true)
    if printf '%s' "$status" | grep -q -E '"state" *: *"FAILED"'; then
        echo "connector or task failed:" >&2
        printf '%s\n' "$status" >&2
        exit 1
    fi
    # one RUNNING for the connector and one for its task (tasks.max = 1)
    running=$(printf '%s' "$status" | grep -o -E '"state" *: *"RUNNING"' | wc -l)
    if [ "$running" -ge 2 ]; then
        echo "connector $CONNECTOR_NAME is running: $status"
        exit 0
    fi
    sleep 2
    waited=$((waited + 2))
done

echo "connector $CONNECTOR_NAME not running after ${WAIT_SECONDS}s: $status" >&2
exit 1
