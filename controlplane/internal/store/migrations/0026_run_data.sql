-- What an attempt fetched and uploaded, as its result attests it: each
-- input's SHA-256, size and ETag and each output's SHA-256, size and MD5
-- (runnerapi.InputRecord, OutputRecord), as {"inputs": [...], "outputs":
-- [...]}. NULL for the attempts of jobs without data.
ALTER TABLE job_runs ADD COLUMN data jsonb;
