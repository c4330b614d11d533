-- A token that a worker gives each claim it sends together with the commit
-- and the next job transaction's begin, so that transaction can lock what
-- the claim took without being told the ids (see hold_claimed_jobs in
-- functions/work.sql): the claim, its commit, the begin and the lock go in
-- one round trip. Each claim has its own token, so the lookup finds its
-- jobs only, even while a long transaction elsewhere keeps the index
-- entries of earlier claims from being cleaned up.
ALTER TABLE pgtask.jobs ADD COLUMN claim_token bigint;

-- The started jobs, by claim token. It replaces jobs_started (the started
-- jobs by id), which rescuing reads whole either way: with both, the
-- planner took jobs_started for the lock, stepping over every dead entry a
-- long transaction kept in it.
CREATE INDEX jobs_claim_token ON pgtask.jobs (claim_token, id)
    WHERE status = 'started';

DROP INDEX pgtask.jobs_started;
