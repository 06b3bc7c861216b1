-- A streaming writer stores, with its progress and in the same transaction as its commit, how far
-- the lake is transaction-consistent with its source (source_watermark) and its own bookkeeping
-- (job_state: e.g. the source transactions it holds back), so a restart resumes from the catalog
-- alone. Per table, the watermark is kept in table_version.summary.
ALTER TABLE writer_progress ADD COLUMN IF NOT EXISTS source_watermark jsonb;
ALTER TABLE writer_progress ADD COLUMN IF NOT EXISTS job_state jsonb;
