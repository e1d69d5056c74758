-- What operators manage and page through: admin tokens they can see and
-- revoke, enrolment tokens they can list and withdraw, and runs listed by
-- runner and across pools, newest first.

-- When a token was last used, written at most once a minute per token by
-- the lookup that authenticates it (see AdminByTokenHash), and who revoked
-- it.
ALTER TABLE admin_tokens
    ADD COLUMN last_used_at timestamptz,
    ADD COLUMN revoked_by   uuid REFERENCES admins (id);

CREATE INDEX admin_tokens_admin ON admin_tokens (admin_id);

-- Admins are listed oldest first, a page at a time.
CREATE INDEX admins_created ON admins (created_at, id);

-- An unused enrolment token can be withdrawn; listed newest first.
ALTER TABLE enrolment_tokens
    ADD COLUMN revoked_at timestamptz,
    ADD COLUMN revoked_by uuid REFERENCES admins (id);

CREATE INDEX enrolment_tokens_created ON enrolment_tokens (created_at, id);

-- Ended attempts, newest first: of one runner, and of any pool (a page of an
-- organisation's runs walks this index and keeps its own pools' runs).
-- Each ended attempt writes one row, so each index costs one entry per
-- attempt, off the claim's path.
CREATE INDEX job_runs_runner ON job_runs (runner_id, finished_at, job_id, attempt) WHERE finished_at IS NOT NULL;
CREATE INDEX job_runs_finished ON job_runs (finished_at, job_id, attempt) WHERE finished_at IS NOT NULL;

-- Holds of a pool's runners, and a runner's past ones, newest first.
CREATE INDEX gpu_holds_runner_created ON gpu_holds (runner_id, created_at);
