-- The sweeper's queue-timeout and unblocking passes (every 10 s, in every
-- replica) read the blocked jobs. With no index of their own they read the
-- whole table, every finished job kept for its retention too: 50 ms at
-- 300,000 jobs, and growing with it. Blocked jobs are few, so the index
-- costs a write only when a job is blocked or unblocked.
CREATE INDEX jobs_blocked ON jobs (pool_id) WHERE state = 'BLOCKED';
