-- The queue index carries each job's GPUs, memory, cores, backoff and
-- kind after its order, so that a claim passes over jobs that do not fit
-- the runner, wait out a backoff or are of another kind in the index
-- itself, without fetching their rows: a CPU runner of a pool whose queue
-- holds thousands of GPU jobs (waiting for a GPU runner) had fetched every
-- one of them on each claim, and each submission to the pool wakes every
-- runner waiting on it to claim. Requeued jobs keep their place at the
-- head of the queue, so their backoff was read the same way. The columns
-- come after id, so the order the claim walks in is unchanged; each entry
-- is about 40 bytes longer, and only a submission or a requeue writes one.
DROP INDEX jobs_queued;
CREATE INDEX jobs_queued ON jobs (pool_id, priority DESC, submitted_at, id, gpus, memory_mib, cores, available_at, kind)
    WHERE state = 'QUEUED';
