-- The compactor's maintenance schedule (table maintenance_schedule, migration 0005).

-- name: schedule_tables
-- Tables served for the first time get a first run spread over the interval (offsets chosen by
-- the caller), so a service that starts with many tables does not run them all at once.
INSERT INTO maintenance_schedule (table_id, next_at)
SELECT t, clock_timestamp() + o * interval '1 second'
FROM unnest(%(table_ids)s::uuid[], %(offsets)s::float8[]) AS r(t, o)
ON CONFLICT (table_id) DO NOTHING

-- name: claim_due
-- Due tables among those served; claimed rows move their next run forward at once, so another
-- coordinator never takes the same table in the same interval.
UPDATE maintenance_schedule s
SET next_at = clock_timestamp() + %(interval_s)s * interval '1 second',
    last_started_at = clock_timestamp()
WHERE s.table_id IN (
    SELECT table_id FROM maintenance_schedule
    WHERE table_id = ANY(%(table_ids)s) AND next_at <= clock_timestamp()
    ORDER BY next_at LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
RETURNING s.table_id

-- name: record_run
UPDATE maintenance_schedule
SET runs = runs + 1, failures = failures + %(failed)s, last_finished_at = clock_timestamp(),
    last_report = %(report)s, last_error = %(error)s
WHERE table_id = %(table_id)s

-- name: schedule_status
SELECT table_id, next_at, runs, failures, last_started_at, last_finished_at, last_report,
       last_error
FROM maintenance_schedule WHERE table_id = ANY(%(table_ids)s)
