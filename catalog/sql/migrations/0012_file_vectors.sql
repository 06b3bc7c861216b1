-- Deletion vectors (docs/design/deletion-vectors.md, D2 and D3): a file entry of file_ops may
-- now carry "vector" (where the file's deletion vector is: {"cardinality", "inline"} or
-- {"cardinality", "path", "offset", "length"}) and "resolved" (true/false). Both are optional:
-- entries written before this migration have neither, and still mean what they meant.
-- The manifest line (migration 0008) gains them as two more fields:
--     ... <TAB> stats <TAB> vector <TAB> resolved
-- vector being the JSON text of the entry's vector (never a raw tab or newline, as for stats)
-- or empty, resolved being true, false or empty.
-- A generated column's expression cannot be changed in place before PostgreSQL 17, so the
-- column is dropped and added again: this rewrites data_commit_info once, filling every row's
-- manifest in the new form (a reader never meets lines of both forms).
ALTER TABLE data_commit_info DROP COLUMN IF EXISTS manifest;

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
            ), '{}'::jsonb)::text,
            -- concat_ws skips nulls: every field must be text, empty when absent
            CASE WHEN jsonb_typeof(o->'file'->'vector') = 'object'
                 THEN (o->'file'->'vector')::text ELSE '' END,
            coalesce(o->'file'->>'resolved', '')
        ) || E'\n', '' ORDER BY e.n), ''), 'UTF8')
    FROM jsonb_array_elements(ops) WITH ORDINALITY AS e(o, n),
    LATERAL (SELECT o->'file'->>'path' AS raw) AS p
);

ALTER TABLE data_commit_info
    ADD COLUMN manifest bytea
    GENERATED ALWAYS AS (file_ops_manifest(file_ops)) STORED;
