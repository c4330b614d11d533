-- Queue names, kinds and group keys enter the claim and group indexes,
-- whose rows PostgreSQL limits to about 2.7 kB; an over-long one used to be
-- accepted for a delayed job and then fail every promotion of due jobs.
-- These bounds match runtime.MaxQueueBytes, MaxKindBytes and
-- MaxGroupKeyBytes. NOT VALID: rows already stored are not scanned, new and
-- changed rows are checked.
ALTER TABLE pgtask.jobs
    ADD CONSTRAINT jobs_queue_bounded CHECK (octet_length(queue) <= 128) NOT VALID,
    ADD CONSTRAINT jobs_kind_bounded CHECK (octet_length(kind) <= 128) NOT VALID,
    ADD CONSTRAINT jobs_group_key_bounded CHECK (octet_length(group_key) <= 1024) NOT VALID;

ALTER TABLE pgtask.queue_groups
    ADD CONSTRAINT queue_groups_queue_bounded CHECK (octet_length(queue) <= 128) NOT VALID,
    ADD CONSTRAINT queue_groups_group_key_bounded CHECK (octet_length(group_key) <= 1024) NOT VALID;
