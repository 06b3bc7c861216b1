-- Planning reads file lists in bulk: a full plan of a million files used to spend ~2 s in the
-- server turning jsonb into text and ~35 s in the client turning that text into one validated
-- object per file. Each data_commit_info row now also carries its file ops as a manifest the
-- client parses as columns (pyarrow's CSV reader, no Python object per file): one line per op,
--     action <TAB> path <TAB> size_bytes <TAB> row_count <TAB> schema_id <TAB> stats
-- stats being a JSON object of [min, max, null_count] per column (half the bytes of file_ops'
-- form, and bytes are what a million-file plan pays for).
-- JSON text never holds a raw tab or newline (they are escaped inside strings); a path that
-- holds one, or starts with a double quote, is written as a JSON string (so a field starting
-- with a quote is always one), and nothing can break the line format. It is a generated column: every writer of file_ops (prepare,
-- a landing compaction's full state, expiry's consolidated rows) keeps it right without knowing
-- it, and existing rows are filled when this migration adds it. file_ops stays the record.
CREATE OR REPLACE FUNCTION file_ops_manifest(ops jsonb) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (
    SELECT convert_to(coalesce(string_agg(
        concat_ws(E'\t',
            o->>'action',
            CASE WHEN p.raw ~ E'[\\t\\n\\r]' OR starts_with(p.raw, '"')
                 THEN (o->'file'->'path')::text ELSE p.raw END,
            o->'file'->>'size_bytes',
            o->'file'->>'row_count',
            coalesce(o->'file'->>'schema_id', '0'),
            coalesce((
                SELECT jsonb_object_agg(c.name, jsonb_build_array(
                    c.stat->'min', c.stat->'max', coalesce(c.stat->'null_count', '0')))
                FROM jsonb_each(o->'file'->'stats') AS c(name, stat)
            ), '{}'::jsonb)::text
        ) || E'\n', '' ORDER BY e.n), ''), 'UTF8')
    FROM jsonb_array_elements(ops) WITH ORDINALITY AS e(o, n),
    LATERAL (SELECT o->'file'->>'path' AS raw) AS p
);

ALTER TABLE data_commit_info
    ADD COLUMN IF NOT EXISTS manifest bytea
    GENERATED ALWAYS AS (file_ops_manifest(file_ops)) STORED;
