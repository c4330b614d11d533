-- revision: 6
-- Batches (runtime.EnqueueBatch): jobs enqueued together, with callback
-- jobs released when all of them have finished and when the first of them
-- fails for good. See pgtask.batches in 0001_baseline.sql.
--
-- Applied with CREATE OR REPLACE when this file's revision rises (see
-- schema/functions.go): raise it with every change.

-- When a parked callback is scheduled to run: never, until its batch
-- releases it. A finite time (the last second of year 9999, the latest
-- RunAt takes), so that every reader can scan it. runtime's parkedAt is the
-- same time.
CREATE OR REPLACE FUNCTION pgtask.parked_at() RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT timestamptz '9999-12-31 23:59:59+00' $$;

-- Makes a batch of the jobs pgtask.enqueue_jobs just inserted in the same
-- statement (see InsertBatch in queries/enqueue.sql): p_ids are their ids,
-- the callbacks first (on_finish, then on_failure, each when asked for),
-- then the batch's jobs; p_existed says for each whether it was inserted.
-- The callbacks were enqueued parked (see parked_at). Returns the
-- batch's id.
--
-- It runs as its owner, like enqueue_jobs, so that a producer role makes
-- batches without any privilege on the tables. So it takes in only jobs
-- that the caller's login enqueued in this transaction (their enqueued_by
-- and created_at say so), callbacks only parked, and none that is in a
-- batch already: a caller cannot make a batch of anyone else's jobs.
CREATE OR REPLACE FUNCTION pgtask.create_batch(p_ids bigint[], p_existed boolean[],
                                               p_on_finish boolean, p_on_failure boolean) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgtask, pg_temp
AS $$
DECLARE
    ncb integer := p_on_finish::integer + p_on_failure::integer;
    n integer := coalesce(cardinality(p_ids), 0);
    members bigint[];
    callbacks bigint[];
    bid bigint;
    taken integer;
BEGIN
    IF n <= ncb THEN
        RAISE EXCEPTION 'pgtask.create_batch: a batch needs at least one job' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF cardinality(p_existed) <> n OR true = ANY (p_existed) THEN
        -- A unique job whose key was held: the batch would take in another's job.
        RAISE EXCEPTION 'pgtask.create_batch: every job of a batch must be new (no unique keys)' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    callbacks := p_ids[1 : ncb];
    members := p_ids[ncb + 1 : n];
    IF (SELECT count(*) FROM pgtask.jobs j
         WHERE j.id = ANY (callbacks) AND j.batch_id IS NULL AND j.enqueued_by = session_user AND j.created_at = now()
           AND j.status = 'scheduled' AND j.run_after = pgtask.parked_at()) <> ncb THEN
        RAISE EXCEPTION 'pgtask.create_batch: a callback is not a parked job this transaction enqueued' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO pgtask.batches (total, on_finish, on_failure, pending_from)
    VALUES (n - ncb,
            CASE WHEN p_on_finish THEN p_ids[1] END,
            CASE WHEN p_on_failure THEN p_ids[ncb] END,
            (SELECT min(m) FROM unnest(members) m))
    RETURNING id INTO bid;
    UPDATE pgtask.jobs j SET batch_id = bid
     WHERE j.id = ANY (members) AND j.batch_id IS NULL AND j.enqueued_by = session_user AND j.created_at = now();
    GET DIAGNOSTICS taken = ROW_COUNT;
    IF taken <> n - ncb OR (SELECT count(DISTINCT m) FROM unnest(members) m) <> n - ncb THEN
        RAISE EXCEPTION 'pgtask.create_batch: a job is not one this transaction enqueued, or is in a batch already' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN bid;
END;
$$;

-- The summary a callback reads (runtime.BatchSummaryOf): the batch's counts
-- now, as a JSON text. Jobs gone (deleted) count as deleted.
CREATE OR REPLACE FUNCTION pgtask.batch_summary(p_batch bigint, p_total integer, p_finished boolean) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
               'batch_id', p_batch, 'total', p_total, 'finished', p_finished,
               'succeeded', count(*) FILTER (WHERE j.status = 'succeeded'),
               'failed', count(*) FILTER (WHERE j.status = 'failed'),
               'cancelled', count(*) FILTER (WHERE j.status = 'cancelled'),
               'deleted', p_total - count(*))::text
      FROM pgtask.jobs j
     WHERE j.batch_id = p_batch
$$;

-- Releases parked callback jobs (p_jobs, each with its summary in
-- p_summaries): due now, with the summary in its metadata under
-- "pgtask.batch", and its wait for a better priority (see age_priorities)
-- counted from now. A callback an operator cancelled (or that is no longer
-- parked for any reason) is left as it is.
CREATE OR REPLACE FUNCTION pgtask.release_callbacks(p_jobs bigint[], p_summaries text[]) RETURNS void
LANGUAGE sql AS $$
    UPDATE pgtask.jobs j
       SET run_after = clock_timestamp(),
           age_due = CASE WHEN j.aging_ms > 0 AND j.priority > 0
                          THEN clock_timestamp() + j.aging_ms * interval '1 millisecond' END,
           metadata = coalesce(j.metadata, '{}') || jsonb_build_object('pgtask.batch', u.summary)
      FROM unnest(p_jobs, p_summaries) AS u(id, summary)
     WHERE j.id = u.id AND j.status = 'scheduled' AND j.run_after = pgtask.parked_at()
$$;

-- Whether batch p_batch has a failed job (for its on_failure), and its
-- first unfinished job from p_from on (NULL for none).
CREATE OR REPLACE FUNCTION pgtask.batch_progress(p_batch bigint, p_from bigint, OUT has_failed boolean, OUT next_pending bigint)
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM pgtask.jobs j WHERE j.batch_id = p_batch AND j.status = 'failed'),
           (SELECT j.id FROM pgtask.jobs j
             WHERE j.batch_id = p_batch AND j.id >= p_from AND pgtask.job_pending(j.status)
             ORDER BY j.id
             LIMIT 1)
$$;

-- Looks at up to p_limit open batches whose id is above p_after, in id
-- order, and ends those whose jobs have all finished (succeeded, failed for
-- good, cancelled or deleted): records their counts, releases on_finish,
-- and cancels an on_failure that no failure released. A batch with a
-- failed job and an on_failure not released yet has it released. checked
-- is how many batches it looked at, last the id of the last one (0 for
-- none), finished how many it ended.
--
-- Exactly once: a batch is changed only under its row lock, taken with
-- SKIP LOCKED (a batch that another worker has locked is passed over: that
-- worker decides it now), and looked at again under it; no batch's lock
-- is waited for (only a callback's row that someone else holds locked),
-- and locks are taken in id order; a callback is
-- released only in the transaction that sets the batch's failed_at or
-- finished_at, when it was not set. Whoever crashes, the transaction
-- commits both or neither. A job finishing in a transaction not yet
-- committed is unfinished here, and found finished a round later. An
-- operator's retry of one of its jobs (retry_job) updates the batch's row,
-- so it waits for the lock: it commits before the batch is looked at, and
-- is seen, or after the batch ended, and changes nothing.
--
-- Cost: a batch that goes on is only read, and its row written only when
-- its cursor moves. The check reads the batch's jobs from pending_from,
-- which it moves on to the first unfinished job, so a finished job is
-- stepped over about once (not each round, however many dead index
-- entries a long transaction elsewhere keeps around); a batch's counts are
-- read when it fails first and when it ends.
CREATE OR REPLACE FUNCTION pgtask.finish_batches(p_after bigint, p_limit integer,
                                                 OUT checked integer, OUT last bigint, OUT finished integer)
LANGUAGE plpgsql AS $$
DECLARE
    b pgtask.batches;
    st record;
    failure_due boolean;
    summary text;
    -- The callbacks to release and to cancel, at the end, in one statement
    -- each (see there).
    release_ids bigint[] := '{}';
    release_summaries text[] := '{}';
    cancel_ids bigint[] := '{}';
    i integer;
    bad text;
BEGIN
    checked := 0;
    last := 0;
    finished := 0;
    FOR b IN SELECT * FROM pgtask.batches
              WHERE finished_at IS NULL AND id > p_after
              ORDER BY id
              LIMIT p_limit
    LOOP
        checked := checked + 1;
        last := b.id;
        st := pgtask.batch_progress(b.id, b.pending_from);
        failure_due := b.on_failure IS NOT NULL AND b.failed_at IS NULL AND st.has_failed;
        IF st.next_pending IS NOT NULL AND NOT failure_due THEN
            IF st.next_pending > b.pending_from THEN
                -- Moved under the lock, from what is committed then: an
                -- operator's retry of a job at or past the cursor, which
                -- committed after the read above, leaves pending_from as it
                -- was, and must not be stepped past. Without waiting: a batch
                -- someone has locked (a retry in flight, another worker)
                -- keeps its cursor until a later round.
                SELECT * INTO b FROM pgtask.batches WHERE id = b.id AND finished_at IS NULL FOR UPDATE SKIP LOCKED;
                IF FOUND THEN
                    st := pgtask.batch_progress(b.id, b.pending_from);
                    IF st.next_pending > b.pending_from THEN
                        UPDATE pgtask.batches SET pending_from = st.next_pending WHERE id = b.id;
                    END IF;
                END IF;
            END IF;
            CONTINUE;
        END IF;
        -- Something to do: under the lock, from what is committed now.
        SELECT * INTO b FROM pgtask.batches WHERE id = b.id AND finished_at IS NULL FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        st := pgtask.batch_progress(b.id, b.pending_from);
        IF b.on_failure IS NOT NULL AND b.failed_at IS NULL AND st.has_failed THEN
            b.failed_at := clock_timestamp();
            UPDATE pgtask.batches SET failed_at = b.failed_at WHERE id = b.id;
            release_ids := release_ids || b.on_failure;
            release_summaries := release_summaries || pgtask.batch_summary(b.id, b.total, false);
        END IF;
        IF st.next_pending IS NOT NULL THEN
            IF st.next_pending > b.pending_from THEN
                UPDATE pgtask.batches SET pending_from = st.next_pending WHERE id = b.id;
            END IF;
            CONTINUE;
        END IF;
        summary := pgtask.batch_summary(b.id, b.total, true);
        UPDATE pgtask.batches
           SET finished_at = clock_timestamp(), pending_from = 9223372036854775807,
               succeeded = (summary::jsonb ->> 'succeeded')::integer,
               failed = (summary::jsonb ->> 'failed')::integer,
               cancelled = (summary::jsonb ->> 'cancelled')::integer,
               deleted = (summary::jsonb ->> 'deleted')::integer
         WHERE id = b.id;
        finished := finished + 1;
        IF b.on_finish IS NOT NULL THEN
            release_ids := release_ids || b.on_finish;
            release_summaries := release_summaries || summary;
        END IF;
        IF b.on_failure IS NOT NULL AND b.failed_at IS NULL THEN
            -- No job failed: the on-failure callback will never run.
            cancel_ids := cancel_ids || b.on_failure;
        END IF;
    END LOOP;
    -- The callbacks change in the transaction that ends or fails their
    -- batches, so both commit or neither. All at once; only when that
    -- fails on a row that breaks a check the table was given NOT VALID
    -- after it was stored (see unwritable_row), one at a time, so that the
    -- others are released, the batches end, and the rest of maintenance
    -- goes on: such a callback stays parked for an operator to delete.
    IF cardinality(release_ids) + cardinality(cancel_ids) = 0 THEN
        RETURN;
    END IF;
    BEGIN
        PERFORM pgtask.release_callbacks(release_ids, release_summaries);
        UPDATE pgtask.jobs SET status = 'cancelled', finished_at = now()
         WHERE id = ANY (cancel_ids) AND status = 'scheduled' AND run_after = pgtask.parked_at();
    EXCEPTION WHEN integrity_constraint_violation THEN
        FOR i IN 1 .. cardinality(release_ids) LOOP
            BEGIN
                PERFORM pgtask.release_callbacks(ARRAY[release_ids[i]], ARRAY[release_summaries[i]]);
            EXCEPTION WHEN integrity_constraint_violation THEN
                GET STACKED DIAGNOSTICS bad = CONSTRAINT_NAME;
                PERFORM pgtask.unwritable_row(format('callback job %s of a batch not released', release_ids[i]), bad);
            END;
        END LOOP;
        FOR i IN 1 .. cardinality(cancel_ids) LOOP
            BEGIN
                UPDATE pgtask.jobs SET status = 'cancelled', finished_at = now()
                 WHERE id = cancel_ids[i] AND status = 'scheduled' AND run_after = pgtask.parked_at();
            EXCEPTION WHEN integrity_constraint_violation THEN
                GET STACKED DIAGNOSTICS bad = CONSTRAINT_NAME;
                PERFORM pgtask.unwritable_row(format('on-failure callback job %s of a batch not cancelled', cancel_ids[i]), bad);
            END;
        END LOOP;
    END;
END;
$$;

-- Retention: deletes up to p_limit batches that ended more than
-- p_older_than_ms ago, the oldest first, and returns how many. Their jobs
-- keep their batch_id; retention deletes them by their own ages.
CREATE OR REPLACE FUNCTION pgtask.delete_finished_batches(p_older_than_ms bigint, p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    deleted integer;
BEGIN
    WITH doomed AS (
        SELECT b.id FROM pgtask.batches b
         WHERE b.finished_at IS NOT NULL
           AND b.finished_at < clock_timestamp() - p_older_than_ms * interval '1 millisecond'
         ORDER BY b.finished_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    )
    DELETE FROM pgtask.batches b USING doomed WHERE b.id = doomed.id;
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN deleted;
END;
$$;
