-- name: SetRunnerCapacity :exec
-- The capacity a runner reported at enrolment, before it may heartbeat.
UPDATE runners
SET capacity = @capacity, gpus = @gpus, cores = @cores, memory_mib = @memory_mib,
    gpu_count = @gpu_count, gpus_healthy = @gpus_healthy, enforces_limits = @enforces_memory
WHERE id = @id;

-- name: SetRunnerInventory :exec
-- Snapshots what the runner has now as the inventory later heartbeats are
-- held to (at approval, and when an administrator clears a quarantine).
UPDATE runners SET inventory = @inventory WHERE id = @id;

-- name: RecordHeartbeats :many
-- One statement for a batch of heartbeats, passed as one JSON array. Each
-- runner's GPU faults as this beat leaves them come back: the answer says
-- them, whatever a replica's cache of the runner holds. A runner that is no longer
-- approved matches nothing, and so is not recorded. A drift reason
-- quarantines a runner that is not quarantined already (the first reason
-- is kept), and the same statement tells every replica (caches,
-- runnerEvents): a notify sent after it could be lost between the two.
WITH updated AS (
UPDATE runners r
SET agent_version     = v.agent_version,
    last_heartbeat_at = coalesce(sqlc.narg('now')::timestamptz, now()),
    capacity          = v.capacity,
    gpus              = v.gpus,
    health            = v.health,
    cores             = v.cores,
    memory_mib        = v.memory_mib,
    gpu_count         = v.gpu_count,
    -- A GPU the server holds a fault against is not healthy, whatever the
    -- report says (a restarted agent knows nothing of it): placement
    -- counts only healthy GPUs. (r.gpu_faults is the row as it was: a
    -- fault new in this beat comes with its GPU reported unhealthy.)
    gpus_healthy      = CASE WHEN r.gpu_faults = '[]' THEN v.gpus_healthy
                             ELSE v.gpus_healthy - (SELECT count(*) FROM jsonb_array_elements(v.gpus) g
                                                    WHERE (g->>'healthy')::boolean
                                                      AND r.gpu_faults @> jsonb_build_array(jsonb_build_object('uuid', g->'uuid')))::int END,
    enforces_limits   = v.enforces_memory,
    quarantined_at    = CASE WHEN r.quarantined_at IS NULL AND v.drift <> '' THEN coalesce(sqlc.narg('now')::timestamptz, now()) ELSE r.quarantined_at END,
    quarantine_reason = CASE WHEN r.quarantined_at IS NULL AND v.drift <> '' THEN v.drift ELSE r.quarantine_reason END,
    -- New GPU faults (a beat names them only when the runner as the
    -- handler knew it had none for those GPUs) are kept, one per GPU.
    gpu_faults        = CASE WHEN v.new_gpu_faults IS NULL THEN r.gpu_faults
                             ELSE r.gpu_faults || coalesce((
                                 SELECT jsonb_agg(f) FROM jsonb_array_elements(v.new_gpu_faults) f
                                 WHERE NOT r.gpu_faults @> jsonb_build_array(jsonb_build_object('uuid', f->'uuid'))), '[]') END
FROM jsonb_to_recordset(@beats::jsonb) AS v (
        id uuid, agent_version text, capacity jsonb, gpus jsonb, health jsonb,
        cores float8, memory_mib bigint, gpu_count int, gpus_healthy int, enforces_memory boolean, drift text,
        new_gpu_faults jsonb)
WHERE r.id = v.id AND r.status = 'APPROVED'
RETURNING r.id, (r.quarantined_at IS NOT NULL)::boolean AS quarantined, r.draining, r.gpu_faults,
          -- Set by this statement: the drift just quarantined it, or a
          -- GPU fault was kept.
          (v.drift <> '' AND r.quarantine_reason = v.drift
           AND r.quarantined_at = coalesce(sqlc.narg('now')::timestamptz, now())
           OR v.new_gpu_faults IS NOT NULL)::boolean AS changed
)
SELECT u.id, u.quarantined, u.draining, u.gpu_faults, u.changed
FROM updated u
LEFT JOIN LATERAL (SELECT pg_notify('runmesh_runner_status', u.id::text) WHERE u.changed) n ON true;

-- name: ClearGPUFault :execrows
-- An administrator returns a GPU to service: its fault is dropped.
UPDATE runners
SET gpu_faults = coalesce((SELECT jsonb_agg(f) FROM jsonb_array_elements(gpu_faults) f WHERE f->>'uuid' <> @gpu_uuid::text), '[]')
WHERE id = @id AND gpu_faults @> jsonb_build_array(jsonb_build_object('uuid', @gpu_uuid::text));

-- name: SetRunnerDraining :exec
UPDATE runners SET draining = @draining WHERE id = @id;

-- name: RetireRunner :exec
UPDATE runners SET retired_at = coalesce(retired_at, now()), draining = true WHERE id = @id;

-- name: ClearQuarantine :exec
-- Clears the quarantine, starts the count of host faults afresh, and takes
-- what the runner has now as its inventory.
UPDATE runners
SET quarantined_at = NULL, quarantine_reason = '', failures_in_a_row = 0, inventory = @inventory
WHERE id = @id;

-- name: FleetCounts :many
-- Runners by status and whether they heartbeated within their pool's lease
-- (the "online" rule), with their GPUs: what /metrics shows.
SELECT r.status,
       -- A runner that never heartbeated is offline (the comparison alone
       -- is NULL for it, and broke the whole scrape).
       coalesce(r.last_heartbeat_at > now() - make_interval(secs => coalesce(p.lease_seconds, @default_lease_seconds::int)), false)::boolean AS online,
       count(*)::bigint AS runners,
       coalesce(sum(r.gpu_count), 0)::bigint AS gpus,
       coalesce(sum(r.gpus_healthy), 0)::bigint AS gpus_healthy
FROM runners r JOIN pools p ON p.id = r.pool_id
GROUP BY 1, 2;

-- name: PoolsRunnerSeen :many
-- The newest heartbeat of any runner in each pool.
SELECT pool_id, max(last_heartbeat_at)::timestamptz AS seen
FROM runners
WHERE pool_id = ANY(@pool_ids::uuid[]) AND last_heartbeat_at IS NOT NULL
GROUP BY pool_id;
