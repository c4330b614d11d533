-- Tables of pgtask-bench, created in the benchmark's own database. Not a
-- migration of pgtask's.
CREATE SCHEMA IF NOT EXISTS pgtask_bench;

-- One row per client of the UPDATE floor: the cheapest write transaction
-- there is, to compare job throughput against.
CREATE TABLE IF NOT EXISTS pgtask_bench.counters (
    id integer PRIMARY KEY,
    n  bigint NOT NULL DEFAULT 0
);
