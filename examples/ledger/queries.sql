-- name: AddEntry :exec
INSERT INTO ledger.entries (account, cents, job_id) VALUES (@account, @cents, @job_id);

-- name: AccountTotal :one
SELECT coalesce(sum(cents), 0)::bigint AS cents FROM ledger.entries WHERE account = @account;

-- name: ListEntries :many
-- Every entry, in the order they were written.
SELECT account, cents FROM ledger.entries ORDER BY id;
