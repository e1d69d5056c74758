-- The waiting runners (runner_waits, migration 0027) outside the claim,
-- which writes and removes its own runner's row as it claims.

-- name: StopWaiting :many
-- The runner no longer waits for work: its long poll ended without work
-- (the request went away), or it was drained or retired. Its row goes;
-- wake says whether it was still waiting and runners of its pool with
-- more room wait, which may have passed over jobs for it and should claim
-- again.
WITH stopped AS (
    DELETE FROM runner_waits d WHERE d.runner_id = @runner_id
    RETURNING d.runner_id, d.pool_id, d.until, d.gpus, d.cores, d.memory_mib
)
SELECT s.pool_id, (s.until > now() AND EXISTS (
    SELECT 1 FROM runner_waits w
    WHERE w.pool_id = s.pool_id AND w.runner_id <> s.runner_id AND w.until > now()
      AND (w.gpus, w.cores, w.memory_mib) > (s.gpus, s.cores, s.memory_mib)))::boolean AS wake
FROM stopped s;

-- name: PruneWaits :execrows
-- Rows whose wait ended a while ago: of runners that stopped asking
-- without a word (a claim that leases removes its own), or left the pool.
-- The claims already pass over them; this keeps the table as small as the
-- number of runners waiting.
DELETE FROM runner_waits WHERE until < now() - make_interval(secs => @grace_seconds::int);
