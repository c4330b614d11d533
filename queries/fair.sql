-- name: AdvanceFairClocks :one
-- Moves each fair queue's clock on; see pgtask.advance_fair_clocks.
SELECT pgtask.advance_fair_clocks()::integer AS moved;

-- name: SetFairQueue :one
-- Makes a queue fair or not; see pgtask.set_fair_queue.
SELECT pgtask.set_fair_queue(@queue::text, @fair::boolean)::boolean AS changed;

-- name: SetTenantWeight :one
-- Sets a tenant's weight in a fair queue; see pgtask.set_tenant_weight.
SELECT pgtask.set_tenant_weight(@queue::text, @tenant::text, @weight::integer)::integer AS previous;

-- name: ListFairQueues :many
-- The fair queues, by name.
SELECT f.queue, f.clock, f.declared_at FROM pgtask.fair_queues f ORDER BY f.queue;

-- name: ListFairTenants :many
-- The tenants of fair queues with their weights and queued jobs; see
-- pgtask.fair_tenants. An empty queue means every fair queue.
SELECT t.queue::text AS queue, t.tenant::text AS tenant, t.weight::integer AS weight,
       t.queued::bigint AS queued
  FROM pgtask.fair_tenants(nullif(@queue::text, ''), @top::integer) t;

-- name: GetJobTenant :one
-- A job's tenant and turn in its fair queue, NULL for a job of a queue that
-- is not fair.
SELECT j.tenant, j.fair_seq FROM pgtask.jobs j WHERE j.id = @id;
