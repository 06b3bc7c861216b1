-- The compactor's work queue, in the catalog database so that it shares the catalog's backups,
-- migrations and test template, and so that a task can be enqueued against the same table ids.
--
-- A task is LIVE while state is 'queued' or 'running'. At most one live task per leaf partition
-- (bucket included) of a table: the partial unique index below is what keeps two coordinators
-- from planning the same work, whatever their timing. Workers claim with FOR UPDATE SKIP LOCKED
-- and hold a lease (leased_until, on the database clock) that they renew from a heartbeat; a
-- running task whose lease lapsed is claimable again. Finished tasks ('done') keep their figures
-- for `lakestream compactor status` and metrics until the coordinator prunes them.
CREATE TABLE compaction_task (
    task_id         uuid PRIMARY KEY,
    table_id        uuid NOT NULL REFERENCES table_info ON DELETE CASCADE,
    table_name      text NOT NULL,
    partition_desc  text NOT NULL,
    kind            text NOT NULL,
    base_version    bigint NOT NULL,
    spec            jsonb NOT NULL,              -- inputs, drop_deletes, target_file_size
    planned_by      text NOT NULL,
    enqueued_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    state           text NOT NULL DEFAULT 'queued',
    worker_id       text,
    leased_until    timestamptz,
    attempts        int NOT NULL DEFAULT 0,       -- claims so far
    lease_expiries  int NOT NULL DEFAULT 0,       -- claims that took over a lapsed lease
    started_at      timestamptz,
    finished_at     timestamptz,
    outcome         text,                         -- an OutcomeStatus value, or 'failed'
    version         bigint,
    outputs         jsonb,
    rows_in         bigint,
    rows_out        bigint,
    bytes_in        bigint,
    bytes_out       bigint,
    duration_s      double precision,
    error           text,
    CHECK (state IN ('queued', 'running', 'done')),
    CHECK ((state = 'running') = (leased_until IS NOT NULL)),
    CHECK ((state = 'done') = (outcome IS NOT NULL))
);

-- One live task per (table, partition): the guard against double planning.
CREATE UNIQUE INDEX compaction_task_one_live
    ON compaction_task (table_id, partition_desc) WHERE state IN ('queued', 'running');
-- Claims walk live tasks oldest first.
CREATE INDEX compaction_task_claimable
    ON compaction_task (enqueued_at) WHERE state IN ('queued', 'running');
-- Enqueue skips work a finished task already planned at the same or a newer base version.
CREATE INDEX compaction_task_planned
    ON compaction_task (table_id, partition_desc, base_version);
-- Status, metrics and pruning read finished tasks by age.
CREATE INDEX compaction_task_finished
    ON compaction_task (finished_at) WHERE state = 'done';
