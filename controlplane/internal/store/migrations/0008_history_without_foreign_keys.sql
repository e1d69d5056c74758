-- A job's events and runs are history: rows only the store writes, in the
-- transaction that inserts or changes the job, and jobs are never deleted.
-- Their foreign keys checked that again on every row, each check a query of
-- its own and a share lock on the job or runner row: four checks of a job's
-- six history writes, about a tenth of bench-lease's PostgreSQL time.
-- (Migration 0009 drops those of the jobs themselves, for the same reason.)
ALTER TABLE job_events DROP CONSTRAINT job_events_job_id_fkey;
ALTER TABLE job_runs DROP CONSTRAINT job_runs_job_id_fkey, DROP CONSTRAINT job_runs_runner_id_fkey;
