-- Where a table's Iceberg metadata is and how far it got (issue 51).
--
-- A table of its own, not table properties: properties are the user's configuration, set at
-- creation, while this row is the exporter's state, moved on every export and compared-and-set
-- (metadata_location is the pointer of the Iceberg table: two exporters racing for the same
-- table, the CLI and the compactor, must not both move it; the loser's commit fails and it
-- exports again from the winner's metadata).
CREATE TABLE iceberg_metadata (
    table_id            uuid PRIMARY KEY REFERENCES table_info ON DELETE CASCADE,
    metadata_location   text NOT NULL,
    -- the lakestream version the current Iceberg snapshot shows (-1: none exported yet)
    version             bigint NOT NULL CHECK (version >= -1),
    -- versions after it that could not be expressed yet (CDC buckets awaiting compaction)
    lag_versions        bigint NOT NULL DEFAULT 0 CHECK (lag_versions >= 0),
    exported_at         timestamptz NOT NULL DEFAULT clock_timestamp()
);
