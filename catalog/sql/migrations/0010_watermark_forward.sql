-- A writer's source watermark never moves backwards (issue 46).
--
-- The watermark of a commit says the lake holds every source transaction up to that source
-- position, whole; readers pick consistent cuts by it (catalog.readpoint). A writer that
-- published position P and then a position before P would make a later version claim less
-- than an earlier one - the sign of transactions published out of commit order. The check sits
-- where the progress row is written, in the commit's own transaction, so such a commit does
-- not land at all: SQLSTATE LS002, which the committer raises as WatermarkRegressed.
-- Positions are fixed-width lowercase hex (catalog.SourcePoint): byte order is their order.
CREATE OR REPLACE FUNCTION writer_progress_watermark_forward() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.source_watermark->'batch'->>'position') COLLATE "C"
       < (OLD.source_watermark->'batch'->>'position') COLLATE "C" THEN
        RAISE EXCEPTION 'the source watermark of writer % would move back from % to %',
            NEW.writer_id, OLD.source_watermark->'batch'->>'position',
            NEW.source_watermark->'batch'->>'position'
            USING ERRCODE = 'LS002';
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS writer_progress_watermark_forward ON writer_progress;
CREATE TRIGGER writer_progress_watermark_forward
    BEFORE UPDATE ON writer_progress
    FOR EACH ROW
    WHEN (NEW.source_watermark IS NOT NULL AND OLD.source_watermark IS NOT NULL)
    EXECUTE FUNCTION writer_progress_watermark_forward();
