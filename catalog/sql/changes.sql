-- Named queries of the change feed (catalog/changes.py) and its consumer registry
-- (catalog/consumers.py). Each block starts with "-- name: NAME"; parameters are %(name)s.

-- name: versions_between
-- The versions of a range with what each did to which partitions (a version that touched no
-- partition - a table's creation - has none), and the partitions a compaction named with
-- deletion vectors (a vector it added deletes rows; whether it did is told by the entries).
SELECT v.version, v.commit_op, v.committed_at, (v.summary ->> 'rows_added')::bigint AS rows_added,
       coalesce(array_agg(p.partition_desc ORDER BY p.partition_desc)
                FILTER (WHERE p.partition_desc IS NOT NULL), '{}') AS partitions,
       coalesce(array_agg(p.commit_op ORDER BY p.partition_desc)
                FILTER (WHERE p.partition_desc IS NOT NULL), '{}') AS partition_ops,
       coalesce(array_agg(p.partition_desc ORDER BY p.partition_desc)
                FILTER (WHERE p.commit_op = 'compaction' AND EXISTS (
                    SELECT 1 FROM data_commit_info d
                    WHERE d.table_id = p.table_id AND d.partition_desc = p.partition_desc
                      AND d.commit_id = ANY (p.commit_ids)
                      AND d.file_ops @? '$[*].file.vector')), '{}') AS vector_partitions
FROM table_version v
LEFT JOIN partition_info p ON p.table_id = v.table_id AND p.table_version = v.version
WHERE v.table_id = %(table_id)s AND v.version BETWEEN %(first)s AND %(last)s
GROUP BY v.version, v.commit_op, v.committed_at, v.summary
ORDER BY v.version

-- name: first_version_since
-- The first version committed at or after a time (Delta's startingTimestamp).
SELECT min(version) AS version FROM table_version
WHERE table_id = %(table_id)s AND committed_at >= %(at)s

-- name: upsert_consumer
INSERT INTO change_consumer (table_id, consumer_id, version, ttl)
VALUES (%(table_id)s, %(consumer_id)s, %(version)s, %(ttl)s)
ON CONFLICT (table_id, consumer_id) DO UPDATE
SET version = excluded.version, ttl = excluded.ttl, seen_at = clock_timestamp()
RETURNING consumer_id, version, ttl, registered_at, seen_at,
          seen_at + ttl > clock_timestamp() AS alive

-- name: advance_consumer
UPDATE change_consumer SET version = %(version)s, seen_at = clock_timestamp()
WHERE table_id = %(table_id)s AND consumer_id = %(consumer_id)s
RETURNING consumer_id, version, ttl, registered_at, seen_at,
          seen_at + ttl > clock_timestamp() AS alive

-- name: get_consumer
SELECT consumer_id, version, ttl, registered_at, seen_at,
       seen_at + ttl > clock_timestamp() AS alive
FROM change_consumer WHERE table_id = %(table_id)s AND consumer_id = %(consumer_id)s

-- name: list_consumers
SELECT consumer_id, version, ttl, registered_at, seen_at,
       seen_at + ttl > clock_timestamp() AS alive
FROM change_consumer WHERE table_id = %(table_id)s ORDER BY consumer_id

-- name: drop_consumer
DELETE FROM change_consumer WHERE table_id = %(table_id)s AND consumer_id = %(consumer_id)s
RETURNING consumer_id
