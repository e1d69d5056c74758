-- The queries find what a runner holds by runner_id alone (see ClaimJobs).
-- The check said less: a held job has a runner and a lease expiry, which
-- let a finished job keep its runner so long as its expiry was cleared.
-- Now a job has a runner exactly while it is LEASED or RUNNING, and a
-- lease expiry exactly while it has a runner. Every writer already clears
-- both together, so every row passes.
ALTER TABLE jobs
    DROP CONSTRAINT jobs_check,
    ADD CONSTRAINT jobs_held_check CHECK (
        (state IN ('LEASED', 'RUNNING')) = (runner_id IS NOT NULL)
        AND (runner_id IS NULL) = (lease_expires_at IS NULL));

-- The sweeper now ends the run of an attempt whose lease ran out. Those it
-- left open before (the job has moved on: a later attempt, or no runner)
-- end when their attempt's expiry was recorded.
UPDATE job_runs r
SET finished_at = coalesce((
        SELECT max(e.at) FROM job_events e
        WHERE e.job_id = r.job_id AND e.attempt = r.attempt AND e.type IN ('LEASE_EXPIRED', 'FAILED')), now()),
    return_reason = 'lease expired'
FROM jobs j
WHERE r.job_id = j.id AND r.finished_at IS NULL AND (j.attempt > r.attempt OR j.runner_id IS NULL);
