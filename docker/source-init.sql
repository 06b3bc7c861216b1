-- The sample OLTP source of docker/compose.yaml: a small shop, and what Debezium needs to
-- capture it. Run once by the postgres image (/docker-entrypoint-initdb.d) with psql, as the
-- superuser, in the database POSTGRES_DB, on the first start with an empty data volume.
--
-- The server runs with wal_level=logical (see compose.yaml). Debezium connects as a dedicated
-- role with REPLICATION and read access, not as the superuser; its name and password come from
-- the container's environment (psql \getenv), never from this file.

\getenv cdc_user SOURCE_DB_CDC_USER
\getenv cdc_password SOURCE_DB_CDC_PASSWORD

CREATE SCHEMA shop;

CREATE TABLE shop.customers (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text        NOT NULL,
    email       text        NOT NULL UNIQUE,
    country     char(2)     NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE shop.orders (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_uuid   uuid           NOT NULL DEFAULT gen_random_uuid(),
    customer_id  bigint         NOT NULL REFERENCES shop.customers (id),
    region       text           NOT NULL,
    status       text           NOT NULL DEFAULT 'new'
                 CHECK (status IN ('new', 'paid', 'shipped', 'delivered', 'cancelled')),
    total        numeric(12, 2) NOT NULL,
    items        jsonb          NOT NULL DEFAULT '[]',
    ordered_on   date           NOT NULL DEFAULT current_date,
    created_at   timestamptz    NOT NULL DEFAULT now(),
    updated_at   timestamptz    NOT NULL DEFAULT now()
);

CREATE INDEX orders_customer_idx ON shop.orders (customer_id);

-- Seed data: the connector's initial snapshot turns these into `r` (read) events.
INSERT INTO shop.customers (name, email, country) VALUES
    ('Ada Lovelace',     'ada@example.com',     'GB'),
    ('Grace Hopper',     'grace@example.com',   'US'),
    ('Edsger Dijkstra',  'edsger@example.com',  'NL'),
    ('Barbara Liskov',   'barbara@example.com', 'US'),
    ('Niklaus Wirth',    'niklaus@example.com', 'CH');

INSERT INTO shop.orders (customer_id, region, status, total, items, ordered_on)
SELECT 1 + (n % 5),
       (ARRAY['eu', 'us', 'apac'])[1 + (n % 3)],
       (ARRAY['new', 'paid', 'shipped', 'delivered'])[1 + (n % 4)],
       round((5 + (n * 37) % 500)::numeric + (n % 100) / 100.0, 2),
       jsonb_build_array(jsonb_build_object('sku', 'SKU-' || (100 + n % 17), 'qty', 1 + n % 3)),
       DATE '2026-01-01' + (n % 60)
FROM generate_series(1, 200) AS n;

-- The role Debezium connects as: logical replication and SELECT (for the snapshot), nothing else.
CREATE ROLE :"cdc_user" WITH LOGIN REPLICATION PASSWORD :'cdc_password';
SELECT format('GRANT CONNECT ON DATABASE %I TO %I', current_database(), :'cdc_user') \gexec
GRANT USAGE ON SCHEMA shop TO :"cdc_user";
GRANT SELECT ON ALL TABLES IN SCHEMA shop TO :"cdc_user";
ALTER DEFAULT PRIVILEGES IN SCHEMA shop GRANT SELECT ON TABLES TO :"cdc_user";

-- The publication the connector reads (connector.json: publication.autocreate.mode=disabled,
-- since only a table's owner or a superuser may create one). FOR TABLES IN SCHEMA (PostgreSQL
-- 15+) also covers tables created in `shop` later.
CREATE PUBLICATION lakestream_shop FOR TABLES IN SCHEMA shop;
