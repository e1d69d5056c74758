-- A run record is written once, when its attempt ends (a result, an expired
-- lease, a lease never delivered), with where it ran and how it ended.
-- Before, the claim inserted it and the end updated it: two writes, an
-- index probe and a dead row per attempt on the queue's hot path, measured
-- at an eighth of PostgreSQL's work per job. The attempt a runner holds now
-- is the job row itself: its runner, its attempt, and leased_at, which the
-- claim sets in the update it makes anyway.
--
-- While older replicas still run beside newer ones, an older one inserts a
-- run at the claim (which a newer one completes where the attempt ends),
-- and updates none at the end of an attempt a newer one claimed: that
-- attempt keeps no run record. Upgrade every replica together.
ALTER TABLE jobs ADD COLUMN leased_at timestamptz;

-- Held attempts keep their lease time; their open runs go, to be written
-- when they end.
UPDATE jobs j SET leased_at = r.leased_at
FROM job_runs r
WHERE j.runner_id IS NOT NULL AND r.job_id = j.id AND r.attempt = j.attempt;

DELETE FROM job_runs r
USING jobs j
WHERE j.runner_id IS NOT NULL AND r.job_id = j.id AND r.attempt = j.attempt AND r.finished_at IS NULL;

-- A held job whose run was missing (none should be) gets a lease time too:
-- its run, written when it ends, needs one.
UPDATE jobs SET leased_at = now() WHERE runner_id IS NOT NULL AND leased_at IS NULL;
