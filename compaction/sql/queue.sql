-- Named queries of the compactor's task queue (table compaction_task, created by the catalog's
-- migration 0004). Each block starts with "-- name: NAME"; parameters are %(name)s placeholders.
-- Every time is the database's clock, so leases mean the same on every host.

-- name: enqueue
-- Insert the planned tasks; a task is skipped (no row returned) when its partition already has a
-- live task (the partial unique index decides, even between two coordinators racing), or when a
-- finished task already planned this partition at the same or a newer base version, or landed a
-- compaction after this plan's base (a slow coordinator must not requeue work that has been
-- done: it would only be discarded), or when tasks failed too often at this base.
INSERT INTO compaction_task (task_id, table_id, table_name, partition_desc, kind,
                             base_version, spec, planned_by)
SELECT r.task_id, r.table_id, r.table_name, r.pd, r.kind, r.base, r.spec, %(planned_by)s
FROM unnest(%(task_ids)s::uuid[], %(table_ids)s::uuid[], %(table_names)s::text[],
            %(descs)s::text[], %(kinds)s::text[], %(bases)s::bigint[], %(specs)s::jsonb[])
     AS r(task_id, table_id, table_name, pd, kind, base, spec)
WHERE NOT EXISTS (
    SELECT 1 FROM compaction_task d
    WHERE d.table_id = r.table_id AND d.partition_desc = r.pd
      AND (d.base_version >= r.base AND d.outcome IS DISTINCT FROM 'failed'
           OR d.version > r.base))
  AND (SELECT count(*) FROM compaction_task f
       WHERE f.table_id = r.table_id AND f.partition_desc = r.pd AND f.base_version >= r.base
         AND f.outcome = 'failed') < %(max_failures)s
ON CONFLICT DO NOTHING
RETURNING task_id

-- name: claim
-- The oldest claimable task: queued, or running under a lease that lapsed (its worker died or
-- hung) and that has not used up its attempts. SKIP LOCKED: concurrent claimers never wait for
-- each other and never get the same row.
WITH next AS (
    SELECT task_id, state, worker_id FROM compaction_task
    WHERE state = 'queued'
       OR (state = 'running' AND leased_until < clock_timestamp()
           AND attempts < %(max_attempts)s)
    ORDER BY enqueued_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE compaction_task t
SET state = 'running', worker_id = %(worker_id)s,
    leased_until = clock_timestamp() + %(lease)s,
    attempts = t.attempts + 1,
    lease_expiries = t.lease_expiries + CASE WHEN next.state = 'running' THEN 1 ELSE 0 END,
    started_at = clock_timestamp()
FROM next
WHERE t.task_id = next.task_id
RETURNING t.task_id, t.table_id, t.table_name, t.partition_desc, t.kind, t.base_version,
          t.spec, t.attempts, t.leased_until, next.state = 'running' AS took_over,
          next.worker_id AS previous_worker

-- name: renew
UPDATE compaction_task SET leased_until = clock_timestamp() + %(lease)s
WHERE task_id = %(task_id)s AND worker_id = %(worker_id)s AND state = 'running'
RETURNING leased_until

-- name: finish
-- Only the lease holder records the outcome; a worker whose lease was taken over gets no row.
UPDATE compaction_task
SET state = 'done', leased_until = NULL, finished_at = clock_timestamp(),
    outcome = %(outcome)s, version = %(version)s, outputs = %(outputs)s,
    rows_in = %(rows_in)s, rows_out = %(rows_out)s, bytes_in = %(bytes_in)s,
    bytes_out = %(bytes_out)s, duration_s = %(duration_s)s, error = %(error)s
WHERE task_id = %(task_id)s AND worker_id = %(worker_id)s AND state = 'running'
RETURNING task_id

-- name: release
-- A worker that must stop before its task ends hands it back at once, without a lease lapse.
UPDATE compaction_task SET state = 'queued', leased_until = NULL, worker_id = NULL
WHERE task_id = %(task_id)s AND worker_id = %(worker_id)s AND state = 'running'
RETURNING task_id

-- name: give_up_lapsed
-- Running tasks whose lease lapsed after their last allowed attempt: finished as failed, so
-- the partition can be planned again.
UPDATE compaction_task
SET state = 'done', leased_until = NULL, finished_at = clock_timestamp(), outcome = 'failed',
    lease_expiries = lease_expiries + 1,
    error = 'lease lapsed after ' || attempts || ' attempts (workers died or hung)'
WHERE state = 'running' AND leased_until < clock_timestamp() AND attempts >= %(max_attempts)s
RETURNING task_id, table_name, partition_desc

-- name: finished_since
-- Tasks finished after a point in time (metrics; the coordinator's replanning of lost work).
SELECT task_id, table_id, table_name, partition_desc, kind, outcome, finished_at, attempts,
       lease_expiries, rows_in, rows_out, bytes_in, bytes_out, duration_s, error
FROM compaction_task
WHERE state = 'done' AND finished_at > %(since)s
ORDER BY finished_at

-- name: live_tasks
SELECT task_id, table_id, table_name, partition_desc, kind, base_version, state, worker_id,
       attempts, lease_expiries, enqueued_at, started_at, leased_until,
       clock_timestamp() AS now
FROM compaction_task
WHERE state IN ('queued', 'running')
ORDER BY enqueued_at

-- name: recent_results
-- The last finished tasks of each table, newest first.
SELECT task_id, table_id, table_name, partition_desc, kind, outcome, version, finished_at,
       attempts, lease_expiries, rows_in, rows_out, bytes_in, bytes_out, duration_s, error
FROM (
    SELECT *, row_number() OVER (PARTITION BY table_id ORDER BY finished_at DESC) AS nth
    FROM compaction_task WHERE state = 'done'
) t
WHERE nth <= %(per_table)s
ORDER BY table_name, finished_at DESC

-- name: prune
-- Finished tasks are kept for status, metrics and enqueue's check, but bounded: only the newest
-- few per partition, and none finished longer ago than the retention.
DELETE FROM compaction_task c
USING (
    SELECT task_id, finished_at,
           row_number() OVER (PARTITION BY table_id, partition_desc
                              ORDER BY finished_at DESC) AS nth
    FROM compaction_task WHERE state = 'done'
) old
WHERE c.task_id = old.task_id
  AND (old.nth > %(keep_per_partition)s OR old.finished_at < clock_timestamp() - %(retention)s)
RETURNING c.task_id

-- name: now
SELECT clock_timestamp() AS now

-- name: depth
SELECT state, count(*) AS n FROM compaction_task
WHERE state IN ('queued', 'running')
GROUP BY state
