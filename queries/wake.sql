-- name: AnnounceIdle :one
-- Taken by a worker's listening session while some runner of the queue waits
-- for a notification, so that enqueues of the queue notify (see the wake-up
-- lock classes in 0001_baseline.sql). False when an enqueue was testing the
-- lock at that instant: try again.
SELECT pg_try_advisory_lock_shared(pgtask.idle_lock_class(), hashtext(@queue::text)) AS announced;

-- name: WithdrawIdle :exec
-- Every runner of the queue is busy: their next claims find what is enqueued.
SELECT pg_advisory_unlock_shared(pgtask.idle_lock_class(), hashtext(@queue::text));

-- name: EnqueuesInFlight :many
-- The transactions (virtual ids) holding the queue's enqueue lock: enqueues
-- of the queue not yet committed. With among, only those of among.
SELECT l.virtualtransaction::text AS vxid
  FROM pg_catalog.pg_locks l
 WHERE l.locktype = 'advisory'
   AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = current_database())
   AND l.classid = pgtask.enqueue_lock_class()::oid
   AND l.objid = hashtext(@queue::text)::oid
   AND l.objsubid = 2
   AND l.granted
   AND (sqlc.narg(among)::text[] IS NULL OR l.virtualtransaction = ANY (sqlc.narg(among)::text[]));
