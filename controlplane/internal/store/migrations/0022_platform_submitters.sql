-- Organisations submit to the platform's own pools. Such a job carries the
-- organisation it was submitted for; every other job is its pool's
-- organisation's (NULL here: a job of an organisation's pool, or a platform
-- admin's job in a platform pool). Metadata only: no rewrite of the table.
-- No foreign key, as for the jobs' other references (0009): its check
-- would be a trigger on every insert; the store writes it from the
-- submitter's scope, which names an organisation that exists.
ALTER TABLE jobs ADD COLUMN organisation_id uuid;

-- An organisation's jobs in platform pools, newest first: its job lists
-- read them here, never walking other organisations' jobs of those pools.
-- Partial: the jobs of organisations' own pools (nearly all) write nothing
-- to it.
CREATE INDEX jobs_submitter ON jobs (organisation_id, id) WHERE organisation_id IS NOT NULL;

-- An idempotency key is the submitter's: two organisations using the same
-- key in a platform pool make two jobs, and neither sees the other's.
CREATE UNIQUE INDEX jobs_idempotency_by_submitter ON jobs (pool_id, organisation_id, idempotency_key) NULLS NOT DISTINCT
    WHERE idempotency_key IS NOT NULL;
DROP INDEX jobs_idempotency;
