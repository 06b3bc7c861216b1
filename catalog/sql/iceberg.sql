-- Queries of the Iceberg metadata export (catalog/iceberg). Parameters are %(name)s.

-- name: iceberg_pointer
SELECT metadata_location, version, lag_versions, exported_at
FROM iceberg_metadata
WHERE table_id = %(table_id)s;

-- name: iceberg_pointer_insert
-- The first metadata of a table; a concurrent first export loses on the primary key.
INSERT INTO iceberg_metadata (table_id, metadata_location, version)
VALUES (%(table_id)s, %(location)s, -1)
ON CONFLICT (table_id) DO NOTHING;

-- name: iceberg_pointer_swap
-- Compare-and-set of the pointer: moves only from the metadata the commit was made on.
UPDATE iceberg_metadata
SET metadata_location = %(location)s, exported_at = clock_timestamp()
WHERE table_id = %(table_id)s AND metadata_location = %(previous)s;

-- name: iceberg_pointer_record
-- After a commit through another catalog (the SQL catalog): the location it published, and
-- where the export stands.
INSERT INTO iceberg_metadata (table_id, metadata_location, version, lag_versions)
VALUES (%(table_id)s, %(location)s, %(version)s, %(lag)s)
ON CONFLICT (table_id) DO UPDATE
SET metadata_location = EXCLUDED.metadata_location, version = EXCLUDED.version,
    lag_versions = EXCLUDED.lag_versions, exported_at = clock_timestamp();
