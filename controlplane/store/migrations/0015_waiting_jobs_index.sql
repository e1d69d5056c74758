-- The sweeper's queue-timeout pass reads each pool's waiting jobs oldest
-- first, and stops at the first that has not timed out; without this it
-- read the whole queue every 10 s in every replica (a million rows for a
-- backlog of a million). Entries are written when a job is queued or
-- blocked, and never for finished jobs.
CREATE INDEX jobs_waiting ON jobs (pool_id, submitted_at) WHERE state = 'QUEUED' OR state = 'BLOCKED';
