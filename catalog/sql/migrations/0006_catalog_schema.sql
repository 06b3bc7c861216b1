-- The catalog moves into a schema of its own (the one its connections put first on search_path,
-- `lakestream` by default). Catalogs made before this migration sit in `public`, beside whatever
-- the database's users keep there under generic names (`namespace`, `table_info`, ...).
--
-- ALTER TABLE ... SET SCHEMA moves a table with its rows, indexes, constraints and owned
-- sequences; foreign keys follow by reference. The catalog owns no sequences, functions, types or
-- views. A fresh catalog was created in its schema already: nothing is found to move. A catalog
-- kept in `public` on purpose (schema=public) stays where it is.
DO $$
DECLARE
    target text := current_schema();
    rel text;
BEGIN
    IF target IS NULL OR target = 'public' THEN
        RETURN;
    END IF;
    FOREACH rel IN ARRAY ARRAY[
        'schema_migration', 'catalog_property', 'namespace', 'table_info', 'table_schema',
        'table_head', 'table_version', 'data_commit_info', 'partition_info', 'table_partition',
        'commit_key', 'writer_progress', 'cleanup_file', 'compaction_task', 'table_expiry',
        'maintenance_schedule'
    ] LOOP
        IF to_regclass(format('public.%I', rel)) IS NOT NULL
           AND to_regclass(format('%I.%I', target, rel)) IS NULL THEN
            EXECUTE format('ALTER TABLE public.%I SET SCHEMA %I', rel, target);
        END IF;
    END LOOP;
END
$$;
