-- revision: 1
-- Checks that several functions share.
--
-- Applied with CREATE OR REPLACE when this file's revision rises (see
-- schema/functions.go): raise it with every change.

-- Raises unless the transaction runs at READ COMMITTED. Advancing a group,
-- claiming and an operator's change each read the jobs committed after they
-- took their locks, which only READ COMMITTED's statement snapshots show; at
-- a higher level they would miss a job committed meanwhile and strand it.
CREATE OR REPLACE FUNCTION pgtask.require_read_committed(p_what text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'pgtask: % needs a READ COMMITTED transaction, not %',
            p_what, upper(current_setting('transaction_isolation'))
            USING ERRCODE = 'feature_not_supported';
    END IF;
END;
$$;

-- True when a is empty or a one-dimensional array indexed from 1, which
-- enqueue_jobs looks elements up in by position.
CREATE OR REPLACE FUNCTION pgtask.is_list(a anyarray) RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$ SELECT coalesce(array_ndims(a) = 1 AND array_lower(a, 1) = 1, true) $$;
