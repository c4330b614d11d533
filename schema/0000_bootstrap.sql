-- Runs before every migration pass: it creates what the migration runner itself
-- needs, so it must stay idempotent and never change once released.
CREATE SCHEMA IF NOT EXISTS pgtask;

CREATE TABLE IF NOT EXISTS pgtask.migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
