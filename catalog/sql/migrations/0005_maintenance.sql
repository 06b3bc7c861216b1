-- Table maintenance: snapshot expiry, file cleanup (vacuum), partition TTL, and the compactor's
-- maintenance schedule.

-- The expiry horizon of a table: versions below oldest_version were expired (their catalog rows
-- removed). Written BEFORE any row is removed, in its own transaction, so a reader whose snapshot
-- misses a removed row always sees the horizon that explains it (see Table.plan).
CREATE TABLE table_expiry (
    table_id            uuid PRIMARY KEY REFERENCES table_info ON DELETE CASCADE,
    oldest_version      bigint NOT NULL,
    oldest_committed_at timestamptz NOT NULL,
    expired_at          timestamptz NOT NULL
);

-- Expiry removes a commit's idempotency key only once no commit row of it is left (in any
-- table): leftovers() calls a commit row without a key "never published", so the two must go
-- together. This index makes that check a lookup instead of a scan.
CREATE INDEX data_commit_info_commit ON data_commit_info (commit_id);
-- Keys are swept by age, oldest first.
CREATE INDEX commit_key_committed ON commit_key (committed_at);

-- When each table's maintenance (expiry, TTL, vacuum) is due, and what its last run did.
-- Coordinators claim due rows with FOR UPDATE SKIP LOCKED, so two services never run the same
-- table's maintenance at once.
CREATE TABLE maintenance_schedule (
    table_id            uuid PRIMARY KEY REFERENCES table_info ON DELETE CASCADE,
    next_at             timestamptz NOT NULL,
    runs                bigint NOT NULL DEFAULT 0,
    failures            bigint NOT NULL DEFAULT 0,
    last_started_at     timestamptz,
    last_finished_at    timestamptz,
    last_report         jsonb,
    last_error          text
);
CREATE INDEX maintenance_schedule_due ON maintenance_schedule (next_at);
