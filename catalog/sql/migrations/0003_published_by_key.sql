-- A commit row is published exactly when its commit id has a commit_key row (written by the
-- publish transaction). Publishing therefore no longer updates data_commit_info: that UPDATE
-- could never be HOT (the flag sat in a partial index's condition), so every commit left a dead
-- row and new index entries behind, and commits slowed as history grew.
CREATE INDEX commit_key_commit_id ON commit_key (commit_id);
CREATE INDEX data_commit_info_created ON data_commit_info (created_at);
DROP INDEX data_commit_info_pending;
ALTER TABLE data_commit_info DROP COLUMN committed;
