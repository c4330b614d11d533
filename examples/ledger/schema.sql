-- The ledger's own table, beside pgtask's schema in the same database.
CREATE SCHEMA IF NOT EXISTS ledger;

CREATE TABLE IF NOT EXISTS ledger.entries (
    id      bigserial PRIMARY KEY,
    account text   NOT NULL,
    cents   bigint NOT NULL,
    job_id  bigint NOT NULL UNIQUE -- the job that applied it: at most one entry per job
);
