-- Job lists of one pool, or of one organisation's pools, newest first:
-- each pool's jobs read backwards by id, to the limit. Without it such a
-- list stepped through the jobs of every other pool, kept for their
-- retention too. (bench-lease showed no cost above its noise.)
CREATE INDEX jobs_pool ON jobs (pool_id, id);
