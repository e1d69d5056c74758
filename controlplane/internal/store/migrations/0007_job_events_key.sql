-- Events are only ever read by job, in order: (job_id, id) is their key.
-- One index instead of two (id alone, and job_id with id) saves an index
-- write on each of a job's three or more events.
ALTER TABLE job_events DROP CONSTRAINT job_events_pkey, ADD PRIMARY KEY (job_id, id);
DROP INDEX job_events_job;
