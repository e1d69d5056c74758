-- A pool's job list filtered by a state (its failed jobs, say) walked the
-- pool's whole history through jobs_pool and fetched every row to read its
-- state. With the state in the index after its order, btree checks it on
-- each entry and fetches only the rows listed; the walk and its order are
-- unchanged, and each entry is about 10 bytes longer.
DROP INDEX jobs_pool;
CREATE INDEX jobs_pool ON jobs (pool_id, id, state) WHERE finished_at IS NOT NULL OR state = 'QUEUED' OR state = 'BLOCKED';
