-- Jobs: the queue, fenced leases (an attempt number that only grows), the
-- events that record every change, and the runs and logs of each attempt.

CREATE TABLE jobs (
    id                 uuid             PRIMARY KEY DEFAULT gen_random_uuid(),
    pool_id            uuid             NOT NULL REFERENCES pools (id),
    submitted_by       uuid             REFERENCES admins (id),
    image              text             NOT NULL CHECK (length(image) BETWEEN 1 AND 512),
    command            text[]           NOT NULL DEFAULT '{}',
    env                jsonb            NOT NULL DEFAULT '{}',
    -- The claim: what the job books on the runner that holds it.
    cores              double precision NOT NULL CHECK (cores > 0 AND cores <= 4096),
    memory_mib         bigint           NOT NULL CHECK (memory_mib >= 0 AND memory_mib <= 1073741824),
    gpus               integer          NOT NULL CHECK (gpus BETWEEN 0 AND 64),
    wall_clock_seconds integer          NOT NULL CHECK (wall_clock_seconds BETWEEN 1 AND 31536000),
    priority           integer          NOT NULL DEFAULT 0 CHECK (priority BETWEEN -1000 AND 1000),
    max_attempts       integer          NOT NULL DEFAULT 3 CHECK (max_attempts BETWEEN 1 AND 100),
    idempotency_key    text             CHECK (length(idempotency_key) BETWEEN 1 AND 200),
    kind               text             NOT NULL DEFAULT 'default' CHECK (kind ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    state              text             NOT NULL DEFAULT 'QUEUED'
                       CHECK (state IN ('QUEUED', 'LEASED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'EXPIRED', 'BLOCKED')),
    state_reason       text             NOT NULL DEFAULT '',
    -- The newest attempt; every lease takes the next number, and reports
    -- carrying an older one are refused (fencing).
    attempt            integer          NOT NULL DEFAULT 0,
    runner_id          uuid             REFERENCES runners (id),
    lease_expires_at   timestamptz,
    -- Backoff: a requeued job waits until then.
    available_at       timestamptz      NOT NULL DEFAULT now(),
    cancel_requested   boolean          NOT NULL DEFAULT false,
    submitted_at       timestamptz      NOT NULL DEFAULT now(),
    finished_at        timestamptz,
    CHECK ((state IN ('LEASED', 'RUNNING')) = (runner_id IS NOT NULL AND lease_expires_at IS NOT NULL))
);

-- The same key in the same pool is the same job. Partial: most jobs have no
-- key, and every index entry is paid again at each state change.
CREATE UNIQUE INDEX jobs_idempotency ON jobs (pool_id, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- The claim reads this in order: queued jobs of a pool, best first. The id
-- completes the claim's ORDER BY, so it reads the first rows instead of
-- sorting the whole queue.
CREATE INDEX jobs_queued ON jobs (pool_id, priority DESC, submitted_at, id) WHERE state = 'QUEUED';
-- The sweeper scans this: leases that may have expired.
CREATE INDEX jobs_leases ON jobs (lease_expires_at) WHERE state IN ('LEASED', 'RUNNING');
-- What a runner holds (booked capacity, heartbeat answers).
CREATE INDEX jobs_runner ON jobs (runner_id) WHERE runner_id IS NOT NULL;

CREATE TABLE job_events (
    id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id    uuid        NOT NULL REFERENCES jobs (id),
    at        timestamptz NOT NULL DEFAULT now(),
    -- SUBMITTED, LEASED, RUNNING, REQUEUED, SUCCEEDED, FAILED, CANCEL_REQUESTED,
    -- CANCELLED, EXPIRED, BLOCKED, LEASE_EXPIRED
    type      text        NOT NULL,
    attempt   integer     NOT NULL DEFAULT 0,
    runner_id uuid,
    detail    text        NOT NULL DEFAULT ''
);

CREATE INDEX job_events_job ON job_events (job_id, id);

-- One row per attempt: where it ran and how it ended.
CREATE TABLE job_runs (
    job_id          uuid        NOT NULL REFERENCES jobs (id),
    attempt         integer     NOT NULL,
    runner_id       uuid        NOT NULL REFERENCES runners (id),
    runner_name     text        NOT NULL,
    leased_at       timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    -- Exactly one of exit_code and return_reason once finished.
    exit_code       integer,
    return_reason   text,
    host_fault      boolean     NOT NULL DEFAULT false,
    oom             boolean     NOT NULL DEFAULT false,
    peak_memory_mib bigint,
    image_digest    text,
    runner_version  text,
    PRIMARY KEY (job_id, attempt),
    CHECK (exit_code IS NULL OR return_reason IS NULL)
);

CREATE TABLE job_logs (
    job_id  uuid        NOT NULL REFERENCES jobs (id),
    attempt integer     NOT NULL,
    seq     integer     NOT NULL CHECK (seq >= 0),
    data    bytea       NOT NULL CHECK (length(data) <= 65536),
    at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, attempt, seq)
);

ALTER TABLE runners
    ADD COLUMN failures_in_a_row integer NOT NULL DEFAULT 0,
    ADD COLUMN enforces_limits   boolean NOT NULL DEFAULT false;

ALTER TABLE pools
    ADD COLUMN allow_unenforced_memory boolean NOT NULL DEFAULT false;

-- An administrator's hold on some of a runner's GPUs: nothing is placed on
-- them while it lasts.
CREATE TABLE gpu_holds (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    runner_id   uuid        NOT NULL REFERENCES runners (id),
    gpus        integer     NOT NULL CHECK (gpus BETWEEN 1 AND 64),
    reason      text        NOT NULL CHECK (length(reason) BETWEEN 1 AND 500),
    until       timestamptz NOT NULL,
    created_by  uuid        REFERENCES admins (id),
    created_at  timestamptz NOT NULL DEFAULT now(),
    released_at timestamptz
);

CREATE INDEX gpu_holds_runner ON gpu_holds (runner_id) WHERE released_at IS NULL;
