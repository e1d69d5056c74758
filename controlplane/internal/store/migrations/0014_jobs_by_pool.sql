-- Job lists of one pool, or of one organisation's pools, newest first:
-- each pool's jobs read backwards by id, to the limit. Without it such a
-- list stepped through the jobs of every other pool, kept for their
-- retention too. Held jobs are left out (lists find them through
-- jobs_leases): claims and heartbeats rewrite them, and every rewrite of a
-- job writes to each index that covers it.
CREATE INDEX jobs_pool ON jobs (pool_id, id) WHERE finished_at IS NOT NULL OR state = 'QUEUED' OR state = 'BLOCKED';
