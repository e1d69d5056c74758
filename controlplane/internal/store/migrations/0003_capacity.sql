-- Capacity: what each runner measured (at enrolment, then every heartbeat),
-- the inventory an administrator approved, and the controls that keep a
-- runner from taking work.

ALTER TABLE runners
    ADD COLUMN agent_version        text             NOT NULL DEFAULT '',
    ADD COLUMN last_heartbeat_at    timestamptz,
    -- Set when the runner asks for work (leases); "taking work" looks at it.
    ADD COLUMN last_work_request_at timestamptz,
    -- Host, labels, driver and why GPUs are unavailable, as last reported.
    ADD COLUMN capacity             jsonb            NOT NULL DEFAULT '{}',
    -- The GPUs with their latest metrics. One row per runner holds them, so a
    -- heartbeat is one row update, batched with others into one statement.
    ADD COLUMN gpus                 jsonb            NOT NULL DEFAULT '[]',
    ADD COLUMN health               jsonb            NOT NULL DEFAULT '[]',
    -- Denormalised from capacity and gpus, for placement and fleet totals.
    ADD COLUMN cores                double precision NOT NULL DEFAULT 0 CHECK (cores >= 0),
    ADD COLUMN memory_mib           bigint           NOT NULL DEFAULT 0 CHECK (memory_mib >= 0),
    ADD COLUMN gpu_count            integer          NOT NULL DEFAULT 0 CHECK (gpu_count BETWEEN 0 AND 64),
    ADD COLUMN gpus_healthy         integer          NOT NULL DEFAULT 0 CHECK (gpus_healthy BETWEEN 0 AND gpu_count),
    -- What the administrator approved: GPU UUIDs with their memory, and host
    -- memory. A heartbeat with less is drift, and drift quarantines.
    ADD COLUMN inventory            jsonb,
    ADD COLUMN quarantined_at       timestamptz,
    ADD COLUMN quarantine_reason    text             NOT NULL DEFAULT '',
    ADD COLUMN draining             boolean          NOT NULL DEFAULT false,
    ADD COLUMN retired_at           timestamptz;

-- Heartbeats rewrite a runner's row every few seconds. No index covers a
-- column they change, and pages keep room for the new version, so the
-- update is HOT: no index entries, old versions pruned in place. (An index
-- on last_heartbeat_at would cost an entry in every index per heartbeat.)
ALTER TABLE runners SET (fillfactor = 50);
