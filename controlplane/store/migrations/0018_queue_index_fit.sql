-- The queue index carries each job's GPUs, memory and cores after its
-- order, so that a claim passes over jobs that do not fit the runner in
-- the index itself, without fetching their rows: a CPU runner of a pool
-- whose queue holds thousands of GPU jobs (waiting for a GPU runner) had
-- fetched every one of them on each claim, and each submission to the
-- pool wakes every runner waiting on it to claim. The columns come after
-- id, so the order the claim walks in is unchanged; each entry is 24 bytes
-- longer, and only a submission or a requeue writes one.
DROP INDEX jobs_queued;
CREATE INDEX jobs_queued ON jobs (pool_id, priority DESC, submitted_at, id, gpus, memory_mib, cores) WHERE state = 'QUEUED';
