-- lakestream catalog, first schema.
-- Every row a reader needs is found by primary-key or index lookups; nothing scans a table.

CREATE TABLE catalog_property (
    key         text PRIMARY KEY,
    value       text NOT NULL
);

CREATE TABLE namespace (
    name        text PRIMARY KEY,
    properties  jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE table_info (
    table_id            uuid PRIMARY KEY,
    namespace           text NOT NULL REFERENCES namespace (name),
    name                text NOT NULL,
    location            text NOT NULL,
    current_schema_id   int NOT NULL,
    partition_columns   text[] NOT NULL,
    hash_buckets        int NOT NULL,            -- -1: unaware of buckets (append table)
    primary_key         text[] NOT NULL,
    properties          jsonb NOT NULL DEFAULT '{}',
    created_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    dropped_at          timestamptz,
    CHECK (hash_buckets = -1 OR hash_buckets >= 1),
    CHECK ((hash_buckets = -1) = (cardinality(primary_key) = 0))
);
-- one live table per name; dropped incarnations keep their rows until purged
CREATE UNIQUE INDEX table_info_live_name ON table_info (namespace, name) WHERE dropped_at IS NULL;

CREATE TABLE table_schema (
    table_id        uuid NOT NULL REFERENCES table_info ON DELETE CASCADE,
    schema_id       int NOT NULL,
    arrow_schema    bytea NOT NULL,             -- Arrow IPC serialised schema
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (table_id, schema_id)
);

-- The head of a table: one row, locked FOR UPDATE by every commit to the table. Commits to one
-- table are therefore serialised and its versions totally ordered in commit order.
CREATE TABLE table_head (
    table_id        uuid PRIMARY KEY REFERENCES table_info ON DELETE CASCADE,
    version         bigint NOT NULL,
    committed_at    timestamptz NOT NULL
);

-- One row per table version, for history and time travel by time.
CREATE TABLE table_version (
    table_id        uuid NOT NULL REFERENCES table_info ON DELETE CASCADE,
    version         bigint NOT NULL,
    commit_id       uuid NOT NULL,
    commit_op       text NOT NULL,
    committed_at    timestamptz NOT NULL,
    writer_id       text NOT NULL,
    batch_id        bigint NOT NULL,
    summary         jsonb NOT NULL,
    PRIMARY KEY (table_id, version)
);
CREATE INDEX table_version_time ON table_version (table_id, committed_at);

-- File operations of one commit in one leaf partition. Written (committed = false) before the
-- version is published, so files of a writer that died before publishing are findable.
CREATE TABLE data_commit_info (
    table_id        uuid NOT NULL REFERENCES table_info ON DELETE CASCADE,
    partition_desc  text NOT NULL,
    commit_id       uuid NOT NULL,
    commit_op       text NOT NULL,
    file_ops        jsonb NOT NULL,
    committed       boolean NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (table_id, partition_desc, commit_id)
);
CREATE INDEX data_commit_info_pending ON data_commit_info (created_at) WHERE NOT committed;

-- Partition versions (LakeSoul's partition_info). version is contiguous per partition;
-- table_version is the table version that published it. A row of a reset op (compaction, update)
-- holds its whole snapshot in commit_ids and starts a chain (snapshot_start = version); an append
-- or merge row holds only the commits it appended, so a commit costs O(1) whatever the history.
CREATE TABLE partition_info (
    table_id        uuid NOT NULL REFERENCES table_info ON DELETE CASCADE,
    partition_desc  text NOT NULL,
    version         int NOT NULL,
    table_version   bigint NOT NULL,
    commit_op       text NOT NULL,
    snapshot_start  int NOT NULL,
    commit_ids      uuid[] NOT NULL,
    committed_at    timestamptz NOT NULL,
    expression      text,
    PRIMARY KEY (table_id, partition_desc, version),
    UNIQUE (table_id, partition_desc, table_version),
    CHECK (version >= 1 AND snapshot_start BETWEEN 1 AND version)
);

-- The leaf partitions a table has ever had, so listing them never scans partition_info.
CREATE TABLE table_partition (
    table_id        uuid NOT NULL REFERENCES table_info ON DELETE CASCADE,
    partition_desc  text NOT NULL,
    first_version   bigint NOT NULL,
    PRIMARY KEY (table_id, partition_desc)
);

-- Idempotency: (writer, batch) committed once; a replay finds the first commit's result here.
CREATE TABLE commit_key (
    writer_id       text NOT NULL,
    batch_id        bigint NOT NULL,
    commit_id       uuid NOT NULL,
    committed_at    timestamptz NOT NULL,
    result          jsonb NOT NULL,
    PRIMARY KEY (writer_id, batch_id)
);

-- Exactly-once progress of a writer (e.g. a streaming job): written in the commit transaction.
CREATE TABLE writer_progress (
    writer_id       text PRIMARY KEY,
    batch_id        bigint NOT NULL,
    commit_id       uuid NOT NULL,
    source_offsets  jsonb,
    updated_at      timestamptz NOT NULL
);

-- Files that no snapshot will ever reference (a discarded compaction's output, ...), kept for
-- the maintenance job to delete after a grace period.
CREATE TABLE cleanup_file (
    table_id        uuid NOT NULL,
    path            text NOT NULL,
    reason          text NOT NULL,
    commit_id       uuid,
    recorded_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (table_id, path)
);
