-- Writer progress names the table incarnations it was committed to, so a job restarted against a
-- dropped-and-recreated table does not resume from the old table's offsets.
ALTER TABLE writer_progress ADD COLUMN table_ids uuid[] NOT NULL DEFAULT '{}';

-- Maintenance scans cleanup candidates by age.
CREATE INDEX cleanup_file_recorded ON cleanup_file (recorded_at);
