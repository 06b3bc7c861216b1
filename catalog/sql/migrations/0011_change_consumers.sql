-- Readers of a table's change feed that expiry must wait for (issue 50).
--
-- A consumer's version is the last version it has read: it reads changes from version + 1 on,
-- which are computed against the table at version, so expiry keeps that version and every
-- newer one while the consumer is alive. Alive means seen (registered or advanced) within its
-- ttl: a consumer that died cannot pin the table forever. A dead consumer's row stays, so when
-- it comes back behind the horizon it fails naming both versions instead of skipping changes.
CREATE TABLE change_consumer (
    table_id        uuid NOT NULL REFERENCES table_info ON DELETE CASCADE,
    consumer_id     text NOT NULL,
    version         bigint NOT NULL CHECK (version >= 0),
    ttl             interval NOT NULL CHECK (ttl > interval '0'),
    registered_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    seen_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (table_id, consumer_id)
);
