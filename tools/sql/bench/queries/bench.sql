-- name: AddCounters :exec
INSERT INTO pgtask_bench.counters (id)
SELECT generate_series(1, @clients::integer)
ON CONFLICT (id) DO NOTHING;

-- name: BumpCounter :exec
-- One single-row UPDATE transaction of the floor.
UPDATE pgtask_bench.counters SET n = n + 1 WHERE id = @id;
