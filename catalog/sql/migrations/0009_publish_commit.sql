-- The write half of a commit's publication, as one server-side call (catalog.committer).
--
-- A commit's client decides what lands (the conflict matrix, a compaction's full file set) and
-- sends that decision here. This function takes the tables' head locks, checks that the decision
-- still holds, and writes it, so a head lock is held only while this one statement runs in the
-- server - never across a round trip to a client that may be descheduled. Checks that fail raise
-- SQLSTATE LS001 ("stale"): the client then takes the locks first and decides again under them.
--
-- p: {
--   commit_id, writer_id, batch_id, channel,
--   result:   the CommitResult as JSON, completed here (committed_at, each table's version and
--             partition versions) and returned,
--   progress: null, or the writer_progress row (writer_id, source_offsets, source_watermark,
--             job_state),
--   tables: [{                         in result.tables order
--     table_id, commit_op, summary,
--     discarded: [partition_desc], cleanup: [path],
--     landing: [{
--       desc, commit_ids, new_chain,
--       expect: a reset op's plan needs the head it was planned on: the partition version
--               (null: none) that must still be the latest;
--       base, forbidden: an append/merge lands on whatever landed since, unless an op in
--               `forbidden` landed after table version `base` (null: no base, no check);
--       file_ops: a reset op's whole file set (text of a JSON array), or absent
--     }]
--   }]
-- }
CREATE OR REPLACE FUNCTION publish_commit(p jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_table_ids uuid[];
    v_at timestamptz;
    v_result jsonb := p->'result';
    v_table jsonb;
    v_index int;
    v_table_id uuid;
    v_version bigint;
    v_part jsonb;
    v_head record;
    v_pv int;
    v_versions jsonb;
    v_landed uuid[] := '{}';
BEGIN
    SELECT array_agg(DISTINCT (t->>'table_id')::uuid) INTO v_table_ids
    FROM jsonb_array_elements(p->'tables') AS t;
    -- lock order = table_id order, as every committer takes them: no deadlock
    PERFORM 1 FROM table_head WHERE table_id = ANY(v_table_ids) ORDER BY table_id FOR UPDATE;
    IF (SELECT count(*) FROM table_info
        WHERE table_id = ANY(v_table_ids) AND dropped_at IS NULL) <> cardinality(v_table_ids) THEN
        RAISE EXCEPTION 'a table of the commit was dropped' USING ERRCODE = 'LS001';
    END IF;
    IF EXISTS (SELECT 1 FROM commit_key
               WHERE writer_id = p->>'writer_id' AND batch_id = (p->>'batch_id')::bigint) THEN
        RAISE EXCEPTION 'the commit key was committed meanwhile' USING ERRCODE = 'LS001';
    END IF;
    SELECT greatest(clock_timestamp(), max(h.committed_at) + interval '1 microsecond')
    INTO v_at FROM table_head h WHERE h.table_id = ANY(v_table_ids);

    FOR v_table, v_index IN
        SELECT t, n - 1 FROM jsonb_array_elements(p->'tables') WITH ORDINALITY AS e(t, n)
    LOOP
        v_table_id := (v_table->>'table_id')::uuid;
        IF jsonb_array_length(v_table->'discarded') > 0 THEN
            -- a discarded partition's files are never referenced: the cleanup rows replace the
            -- prepared ones
            DELETE FROM data_commit_info
            WHERE table_id = v_table_id AND commit_id = (p->>'commit_id')::uuid
              AND partition_desc IN (SELECT jsonb_array_elements_text(v_table->'discarded'));
            INSERT INTO cleanup_file (table_id, path, reason, commit_id)
            SELECT v_table_id, c, 'discarded by conflict resolution', (p->>'commit_id')::uuid
            FROM jsonb_array_elements_text(v_table->'cleanup') AS c
            ON CONFLICT DO NOTHING;
        END IF;
        CONTINUE WHEN jsonb_array_length(v_table->'landing') = 0;

        UPDATE table_head SET version = version + 1, committed_at = v_at
        WHERE table_id = v_table_id RETURNING version INTO v_version;
        v_versions := '{}';
        FOR v_part IN SELECT * FROM jsonb_array_elements(v_table->'landing') LOOP
            SELECT version, snapshot_start INTO v_head FROM partition_info
            WHERE table_id = v_table_id AND partition_desc = v_part->>'desc'
            ORDER BY table_version DESC LIMIT 1;
            IF v_part ? 'expect' THEN
                IF v_head.version IS DISTINCT FROM (v_part->>'expect')::int THEN
                    RAISE EXCEPTION 'partition % moved', v_part->>'desc' USING ERRCODE = 'LS001';
                END IF;
            ELSIF v_part->>'base' IS NOT NULL AND EXISTS (
                SELECT 1 FROM partition_info
                WHERE table_id = v_table_id AND partition_desc = v_part->>'desc'
                  AND table_version > (v_part->>'base')::bigint
                  AND commit_op IN (SELECT jsonb_array_elements_text(v_part->'forbidden'))
            ) THEN
                RAISE EXCEPTION 'partition % got a conflicting commit', v_part->>'desc'
                    USING ERRCODE = 'LS001';
            END IF;
            v_pv := coalesce(v_head.version, 0) + 1;
            INSERT INTO partition_info (table_id, partition_desc, version, table_version,
                                        commit_op, snapshot_start, commit_ids, committed_at)
            VALUES (v_table_id, v_part->>'desc', v_pv, v_version, v_table->>'commit_op',
                    CASE WHEN (v_part->>'new_chain')::boolean OR v_head.version IS NULL
                         THEN v_pv ELSE v_head.snapshot_start END,
                    ARRAY(SELECT jsonb_array_elements_text(v_part->'commit_ids'))::uuid[],
                    v_at);
            IF v_part ? 'file_ops' THEN
                UPDATE data_commit_info SET file_ops = (v_part->>'file_ops')::jsonb
                WHERE table_id = v_table_id AND partition_desc = v_part->>'desc'
                  AND commit_id = (p->>'commit_id')::uuid;
            END IF;
            v_versions := v_versions || jsonb_build_object(v_part->>'desc', v_pv);
        END LOOP;
        INSERT INTO table_partition (table_id, partition_desc, first_version)
        SELECT v_table_id, l->>'desc', v_version FROM jsonb_array_elements(v_table->'landing') l
        ON CONFLICT DO NOTHING;
        INSERT INTO table_version (table_id, version, commit_id, commit_op, committed_at,
                                   writer_id, batch_id, summary)
        VALUES (v_table_id, v_version, (p->>'commit_id')::uuid, v_table->>'commit_op', v_at,
                p->>'writer_id', (p->>'batch_id')::bigint, v_table->'summary');
        v_result := jsonb_set(v_result, ARRAY['tables', v_index::text, 'version'],
                              to_jsonb(v_version));
        v_result := jsonb_set(v_result, ARRAY['tables', v_index::text, 'partition_versions'],
                              v_versions);
        v_landed := v_landed || v_table_id;
    END LOOP;

    v_result := jsonb_set(v_result, '{committed_at}', to_jsonb(v_at));
    INSERT INTO commit_key (writer_id, batch_id, commit_id, committed_at, result)
    VALUES (p->>'writer_id', (p->>'batch_id')::bigint, (p->>'commit_id')::uuid, v_at, v_result);
    IF jsonb_typeof(p->'progress') = 'object' THEN
        INSERT INTO writer_progress (writer_id, batch_id, commit_id, source_offsets, updated_at,
                                     table_ids, source_watermark, job_state)
        VALUES (p->'progress'->>'writer_id', (p->>'batch_id')::bigint, (p->>'commit_id')::uuid,
                nullif(p->'progress'->'source_offsets', 'null'), v_at,
                ARRAY(SELECT unnest(v_table_ids) ORDER BY 1),
                nullif(p->'progress'->'source_watermark', 'null'),
                nullif(p->'progress'->'job_state', 'null'))
        ON CONFLICT (writer_id) DO UPDATE
        SET batch_id = excluded.batch_id, commit_id = excluded.commit_id,
            source_offsets = excluded.source_offsets, updated_at = excluded.updated_at,
            table_ids = excluded.table_ids, source_watermark = excluded.source_watermark,
            job_state = excluded.job_state;
    END IF;
    -- sent inside the commit: PostgreSQL delivers it exactly when the commit becomes visible,
    -- and never for one that rolled back
    PERFORM pg_notify(p->>'channel', t::text) FROM unnest(v_landed) AS t;
    RETURN v_result;
END
$$;
