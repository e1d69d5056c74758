-- A lease the server granted but could not hand over (the runner's request
-- ended first: a drain, a lost connection) goes back to the queue at once,
-- instead of waiting out its lease and costing the job a try. Its attempt
-- number stays taken (attempt numbers only grow, and fence reports), so the
-- tries a job has used are attempt - undelivered.
ALTER TABLE jobs ADD COLUMN undelivered integer NOT NULL DEFAULT 0;
