-- Named queries of the catalog store. Each block starts with "-- name: NAME"; parameters are
-- %(name)s placeholders, never spliced text.

-- name: lock_tables
-- Serialises commits per table: rows are locked in table_id order, so two multi-table commits
-- never deadlock. Returns the server clock so one commit timestamp serves every table.
SELECT h.table_id, h.version, h.committed_at, t.namespace, t.name, t.dropped_at,
       t.properties, t.current_schema_id, clock_timestamp() AS now
FROM table_head h JOIN table_info t USING (table_id)
WHERE h.table_id = ANY(%(table_ids)s)
ORDER BY h.table_id
FOR UPDATE OF h

-- name: commit_table_heads
-- lock_tables without the locks: what a commit decides on before publish_commit takes them.
SELECT h.table_id, h.version, h.committed_at, t.dropped_at, clock_timestamp() AS now
FROM table_head h JOIN table_info t USING (table_id)
WHERE h.table_id = ANY(%(table_ids)s)

-- name: publish_commit
-- The write half of a commit, decided by the client (migration 0009).
SELECT publish_commit(%(p)s)

-- name: end_backend
-- After a connection died with a commit in flight: end its backend (process ids are reused:
-- only one connected before the commit began) and wait up to timeout_ms for it to exit.
SELECT pg_terminate_backend(pid, %(timeout_ms)s) FROM pg_stat_activity
WHERE pid = %(pid)s AND backend_start < %(since)s

-- name: find_commit_key
SELECT commit_id, result FROM commit_key
WHERE writer_id = %(writer_id)s AND batch_id = %(batch_id)s

-- name: partition_heads
-- The latest version of each named partition at or before a table version: one backward index
-- probe on (table_id, partition_desc, table_version) per partition.
SELECT d.partition_desc, p.version, p.table_version, p.snapshot_start, p.commit_op
FROM unnest(%(descs)s::text[]) AS d(partition_desc)
LEFT JOIN LATERAL (
    SELECT version, table_version, snapshot_start, commit_op FROM partition_info p
    WHERE p.table_id = %(table_id)s AND p.partition_desc = d.partition_desc
      AND p.table_version <= %(table_version)s
    ORDER BY p.table_version DESC LIMIT 1
) p ON true

-- name: all_partition_heads
SELECT tp.partition_desc, p.version, p.table_version, p.snapshot_start, p.commit_op
FROM table_partition tp
CROSS JOIN LATERAL (
    SELECT version, table_version, snapshot_start, commit_op FROM partition_info p
    WHERE p.table_id = tp.table_id AND p.partition_desc = tp.partition_desc
      AND p.table_version <= %(table_version)s
    ORDER BY p.table_version DESC LIMIT 1
) p
WHERE tp.table_id = %(table_id)s AND tp.first_version <= %(table_version)s
ORDER BY tp.partition_desc

-- name: partition_version
SELECT partition_desc, version, table_version, snapshot_start, commit_op FROM partition_info
WHERE table_id = %(table_id)s AND partition_desc = %(partition_desc)s AND version = %(version)s

-- name: landed_since
-- Partition versions published after the table version a commit was planned against.
SELECT partition_desc, version, commit_op, commit_ids, table_version FROM partition_info
WHERE table_id = %(table_id)s AND partition_desc = ANY(%(descs)s)
  AND table_version > %(base)s
ORDER BY partition_desc, version

-- name: snapshot_manifests
-- The commit rows of each partition's snapshot chain, from its start (a reset or version 1) to
-- the version read, with their manifests (migration 0008): n is the partition's place in the
-- arrays, rows come in commit order. A range scan of partition_info's primary key and a probe of
-- data_commit_info's per commit row; one missing (which would be a catalog bug) comes back
-- with a null manifest rather than silently shortening the snapshot.
SELECT r.n, c.cid, d.commit_op, d.manifest
FROM unnest(%(descs)s::text[], %(starts)s::int[], %(ends)s::int[]) WITH ORDINALITY AS r(pd, s, e, n)
JOIN partition_info p
  ON p.table_id = %(table_id)s AND p.partition_desc = r.pd AND p.version BETWEEN r.s AND r.e
CROSS JOIN LATERAL unnest(p.commit_ids) WITH ORDINALITY AS c(cid, k)
LEFT JOIN LATERAL (  -- LIMIT: a probe of the primary key per row, never a hash of the table
    SELECT commit_op, manifest FROM data_commit_info
    WHERE table_id = %(table_id)s AND partition_desc = r.pd AND commit_id = c.cid LIMIT 1
) d ON true
ORDER BY r.n, p.version, c.k

-- name: insert_data_commits
-- %(ops)s is ONE JSON array holding each partition's op list, in the order of %(descs)s: a
-- single text parameter, where a jsonb[] of large documents costs the client an escaping pass.
INSERT INTO data_commit_info (table_id, partition_desc, commit_id, commit_op, file_ops)
SELECT %(table_id)s, d.pd, %(commit_id)s, %(commit_op)s, o.ops
FROM unnest(%(descs)s::text[]) WITH ORDINALITY AS d(pd, n)
JOIN jsonb_array_elements(%(ops)s::jsonb) WITH ORDINALITY AS o(ops, n) USING (n)
ON CONFLICT DO NOTHING

-- name: forget_prepared
DELETE FROM data_commit_info d
WHERE d.table_id = ANY(%(table_ids)s) AND d.commit_id = %(commit_id)s
  AND NOT EXISTS (SELECT 1 FROM commit_key k WHERE k.commit_id = d.commit_id)

-- name: insert_commit_key
INSERT INTO commit_key (writer_id, batch_id, commit_id, committed_at, result)
VALUES (%(writer_id)s, %(batch_id)s, %(commit_id)s, %(committed_at)s, %(result)s)

-- name: writer_progress
SELECT writer_id, batch_id, commit_id, source_offsets, updated_at, table_ids, source_watermark,
       job_state
FROM writer_progress
WHERE writer_id = %(writer_id)s

-- name: table_by_name
SELECT table_id, namespace, name, location, current_schema_id, partition_columns, hash_buckets,
       primary_key, properties, created_at
FROM table_info WHERE namespace = %(namespace)s AND name = %(name)s AND dropped_at IS NULL

-- name: table_by_id
SELECT table_id, namespace, name, location, current_schema_id, partition_columns, hash_buckets,
       primary_key, properties, created_at, dropped_at
FROM table_info WHERE table_id = %(table_id)s

-- name: live_table_names
-- Names of the table incarnations among these ids that were not dropped.
SELECT table_id, namespace, name FROM table_info
WHERE table_id = ANY(%(table_ids)s) AND dropped_at IS NULL
ORDER BY namespace, name

-- name: list_tables
SELECT namespace, name FROM table_info
WHERE dropped_at IS NULL AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s)
ORDER BY namespace, name

-- name: insert_namespace
INSERT INTO namespace (name) VALUES (%(name)s) ON CONFLICT DO NOTHING

-- name: insert_table
INSERT INTO table_info (table_id, namespace, name, location, current_schema_id,
                        partition_columns, hash_buckets, primary_key, properties)
VALUES (%(table_id)s, %(namespace)s, %(name)s, %(location)s, 0, %(partition_columns)s,
        %(hash_buckets)s, %(primary_key)s, %(properties)s)

-- name: insert_table_head
INSERT INTO table_head (table_id, version, committed_at)
VALUES (%(table_id)s, 0, clock_timestamp())

-- name: insert_schema
INSERT INTO table_schema (table_id, schema_id, arrow_schema)
VALUES (%(table_id)s, %(schema_id)s, %(arrow_schema)s)

-- name: set_current_schema
UPDATE table_info SET current_schema_id = %(schema_id)s WHERE table_id = %(table_id)s

-- name: table_schemas
SELECT schema_id, arrow_schema FROM table_schema WHERE table_id = %(table_id)s ORDER BY schema_id

-- name: drop_table
UPDATE table_info SET dropped_at = clock_timestamp()
WHERE namespace = %(namespace)s AND name = %(name)s AND dropped_at IS NULL
RETURNING table_id

-- name: table_head
SELECT version, committed_at FROM table_head WHERE table_id = %(table_id)s

-- name: table_heads
SELECT table_id, version FROM table_head WHERE table_id = ANY(%(table_ids)s)

-- name: table_watermarks
-- The history the consistent read point is chosen from (catalog.readpoint): per table its newest
-- %(limit)s versions up to the head read just before (later ones do not belong to that
-- instant), newest first. One backward probe of the primary key per table.
SELECT h.table_id, v.version, v.commit_op, v.writer_id, v.mark
FROM unnest(%(table_ids)s::uuid[], %(heads)s::bigint[]) AS h (table_id, head)
CROSS JOIN LATERAL (
    SELECT t.version, t.commit_op, t.writer_id, t.summary -> 'source_watermark' AS mark
    FROM table_version t
    WHERE t.table_id = h.table_id AND t.version <= h.head
    ORDER BY t.version DESC
    LIMIT %(limit)s
) AS v
ORDER BY h.table_id, v.version DESC

-- name: version_at_time
SELECT version FROM table_version
WHERE table_id = %(table_id)s AND committed_at <= %(at)s
ORDER BY committed_at DESC LIMIT 1

-- name: table_history
SELECT version, commit_id, commit_op, committed_at, writer_id, batch_id, summary
FROM table_version WHERE table_id = %(table_id)s
  AND version > %(after)s
ORDER BY version DESC LIMIT %(limit)s

-- name: pending_data_commits
-- Commit rows that were prepared but never published (no commit_key row), older than a grace
-- period.
SELECT d.table_id, d.partition_desc, d.commit_id, d.commit_op, d.file_ops, d.created_at
FROM data_commit_info d
WHERE d.created_at < %(before)s
  AND NOT EXISTS (SELECT 1 FROM commit_key k WHERE k.commit_id = d.commit_id)
ORDER BY d.created_at

-- name: cleanup_files
SELECT table_id, path, reason, commit_id, recorded_at FROM cleanup_file
WHERE recorded_at < %(before)s ORDER BY recorded_at

-- name: live_table_heads
-- Every live table with its latest version in one query: how a poller (the compactor's
-- coordinator) finds which tables changed without reading any of them.
SELECT t.table_id, t.namespace, t.name, h.version
FROM table_info t JOIN table_head h USING (table_id)
WHERE t.dropped_at IS NULL
ORDER BY t.namespace, t.name

-- name: table_bytes_by_op
-- Per commit op, the versions of a table committed within %(window)s of its newest one and the
-- bytes they added and wrote (versions from before summary.bytes_written count bytes_added).
-- The window ends at the newest version, not at now(): a quiet table keeps its figures.
SELECT v.commit_op, count(*) AS versions,
       coalesce(sum((v.summary ->> 'bytes_added')::bigint), 0)::bigint AS bytes_added,
       coalesce(sum(coalesce((v.summary ->> 'bytes_written')::bigint,
                             (v.summary ->> 'bytes_added')::bigint)), 0)::bigint AS bytes_written
FROM table_version v
WHERE v.table_id = %(table_id)s
  AND v.committed_at >= (SELECT max(committed_at) FROM table_version
                         WHERE table_id = %(table_id)s) - %(window)s
GROUP BY v.commit_op
