-- Named queries of table maintenance (catalog/maintenance/): expiry, vacuum, TTL.
-- Each block starts with "-- name: NAME"; parameters are %(name)s placeholders.

-- name: expiry_horizon
SELECT oldest_version, oldest_committed_at FROM table_expiry WHERE table_id = %(table_id)s

-- name: set_expiry_horizon
-- The horizon only moves forward, whatever order two expiry runs commit in.
INSERT INTO table_expiry (table_id, oldest_version, oldest_committed_at, expired_at)
VALUES (%(table_id)s, %(version)s, %(committed_at)s, clock_timestamp())
ON CONFLICT (table_id) DO UPDATE
SET oldest_version = excluded.oldest_version, oldest_committed_at = excluded.oldest_committed_at,
    expired_at = excluded.expired_at
WHERE table_expiry.oldest_version < excluded.oldest_version

-- name: consumer_floor
-- The oldest version a live change-feed consumer still needs (catalog/consumers.py): expiry
-- keeps it and everything newer.
SELECT min(version) AS version FROM change_consumer
WHERE table_id = %(table_id)s AND seen_at + ttl > clock_timestamp()

-- name: version_at_or_before
SELECT version, committed_at FROM table_version
WHERE table_id = %(table_id)s AND committed_at <= %(at)s
ORDER BY committed_at DESC LIMIT 1

-- name: version_committed_at
SELECT committed_at FROM table_version WHERE table_id = %(table_id)s AND version = %(version)s

-- name: db_now
SELECT clock_timestamp() AS now

-- name: table_partition_descs
SELECT partition_desc FROM table_partition WHERE table_id = %(table_id)s ORDER BY partition_desc

-- name: delete_partition_rows_below
-- Partition versions below each partition's bound (its version at the horizon, or one past it
-- for a partition removed whole); returns the commit ids they named.
DELETE FROM partition_info p
USING unnest(%(descs)s::text[], %(bounds)s::int[]) AS r(pd, bound)
WHERE p.table_id = %(table_id)s AND p.partition_desc = r.pd AND p.version < r.bound
RETURNING p.partition_desc, p.commit_ids

-- name: restart_chain
-- The horizon's partition version becomes the start of its snapshot chain: it names one commit
-- row holding the partition's whole file set at that version.
UPDATE partition_info SET snapshot_start = version, commit_ids = %(commit_ids)s
WHERE table_id = %(table_id)s AND partition_desc = %(partition_desc)s AND version = %(version)s

-- name: move_chain_start
-- Later versions of the same chain now start where the restarted version is.
UPDATE partition_info SET snapshot_start = %(version)s
WHERE table_id = %(table_id)s AND partition_desc = %(partition_desc)s
  AND version > %(version)s AND snapshot_start < %(version)s

-- name: insert_commit_row
INSERT INTO data_commit_info (table_id, partition_desc, commit_id, commit_op, file_ops)
VALUES (%(table_id)s, %(partition_desc)s, %(commit_id)s, %(commit_op)s, %(file_ops)s::jsonb)

-- name: delete_unreferenced_commit_rows
-- Commit rows among the candidates that no remaining partition version names. (A reordered
-- compaction names commits of earlier versions, so a removed version's commit may still be
-- needed.) Returns their file ops.
DELETE FROM data_commit_info d
USING unnest(%(descs)s::text[], %(commit_ids)s::uuid[]) AS r(pd, cid)
WHERE d.table_id = %(table_id)s AND d.partition_desc = r.pd AND d.commit_id = r.cid
  AND NOT EXISTS (
      SELECT 1 FROM partition_info p
      WHERE p.table_id = d.table_id AND p.partition_desc = d.partition_desc
        AND d.commit_id = ANY(p.commit_ids))
RETURNING d.partition_desc, d.commit_id, d.file_ops

-- name: added_paths
-- Every file some remaining commit row of these partitions adds (published or prepared): the
-- data files and the vector files their entries name (migration 0012).
SELECT DISTINCT f.path
FROM data_commit_info d CROSS JOIN LATERAL jsonb_array_elements(d.file_ops) AS op
CROSS JOIN LATERAL (
    VALUES (op -> 'file' ->> 'path'), (op -> 'file' -> 'vector' ->> 'path')) AS f(path)
WHERE d.table_id = %(table_id)s AND d.partition_desc = ANY(%(descs)s) AND op ->> 'action' = 'add'
  AND f.path IS NOT NULL

-- name: table_added_paths
-- Every file any remaining commit row of the table adds: the files retained versions reference
-- and the files prepared-but-unpublished commits name, data files and vector files alike.
SELECT DISTINCT f.path
FROM data_commit_info d CROSS JOIN LATERAL jsonb_array_elements(d.file_ops) AS op
CROSS JOIN LATERAL (
    VALUES (op -> 'file' ->> 'path'), (op -> 'file' -> 'vector' ->> 'path')) AS f(path)
WHERE d.table_id = %(table_id)s AND op ->> 'action' = 'add' AND f.path IS NOT NULL

-- name: delete_table_partitions
DELETE FROM table_partition WHERE table_id = %(table_id)s AND partition_desc = ANY(%(descs)s)

-- name: insert_cleanup_paths
INSERT INTO cleanup_file (table_id, path, reason, commit_id)
SELECT %(table_id)s, path, %(reason)s, NULL FROM unnest(%(paths)s::text[]) AS path
ON CONFLICT DO NOTHING

-- name: delete_versions_below
DELETE FROM table_version
WHERE table_id = %(table_id)s AND version IN (
    SELECT version FROM table_version
    WHERE table_id = %(table_id)s AND version < %(version)s
    ORDER BY version LIMIT %(limit)s)
RETURNING version

-- name: sweep_commit_keys
-- Idempotency keys of this table's commits from before the horizon, once no commit row of the
-- commit is left in any table, except the key of each writer's last batch (a writer replays
-- its last batch after a crash and must find it).
DELETE FROM commit_key k
WHERE (k.writer_id, k.batch_id) IN (
    SELECT c.writer_id, c.batch_id FROM commit_key c
    WHERE c.committed_at < %(before)s
      AND c.result -> 'tables' @> %(table)s::jsonb
      AND NOT EXISTS (SELECT 1 FROM data_commit_info d WHERE d.commit_id = c.commit_id)
      AND NOT EXISTS (SELECT 1 FROM writer_progress w WHERE w.commit_id = c.commit_id)
    ORDER BY c.committed_at LIMIT %(limit)s)
RETURNING k.writer_id

-- name: cleanup_rows
SELECT path, reason, recorded_at, recorded_at < %(before)s AS due
FROM cleanup_file WHERE table_id = %(table_id)s

-- name: delete_cleanup_rows
DELETE FROM cleanup_file WHERE table_id = %(table_id)s AND path = ANY(%(paths)s)
