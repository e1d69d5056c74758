-- People's sessions on running jobs (attach, exec): who, what, when, and
-- how many bytes each way. Never the bytes themselves. A row is written
-- when a session opens and completed when it ends, by the replica that
-- relays it; one whose replica died mid-session keeps ended_at NULL.
-- History like job_runs: no foreign key (a job's rows go with it when
-- the job is pruned, DeleteJobs).
CREATE TABLE job_sessions (
    id          uuid        PRIMARY KEY,
    job_id      uuid        NOT NULL,
    attempt     integer     NOT NULL,
    admin_id    uuid,
    admin_name  text        NOT NULL,
    kind        text        NOT NULL CHECK (kind IN ('attach', 'exec')),
    command     text[],
    started_at  timestamptz NOT NULL DEFAULT now(),
    ended_at    timestamptz,
    bytes_in    bigint      NOT NULL DEFAULT 0,
    bytes_out   bigint      NOT NULL DEFAULT 0,
    end_code    text
);

CREATE INDEX job_sessions_job ON job_sessions (job_id, started_at);
