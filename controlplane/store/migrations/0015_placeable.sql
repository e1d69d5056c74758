-- Whether some approved runner of a pool, empty, could hold a claim: the
-- sweeper's blocked and unblocked checks ask it of queued and blocked
-- jobs. One definition instead of a copy in each query. (Runners that are
-- merely busy, offline or draining still could, later; a memory claim needs
-- a runner that enforces memory limits unless the pool says otherwise.)
-- The arguments are named apart from the runners' columns: in a SQL
-- function a column of the same name would win.
CREATE FUNCTION runmesh_placeable(in_pool uuid, claim_cores double precision, claim_memory_mib bigint, claim_gpus integer)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM runners r JOIN pools p ON p.id = r.pool_id
        WHERE r.pool_id = in_pool AND r.status = 'APPROVED' AND r.retired_at IS NULL
          AND claim_cores <= r.cores AND claim_memory_mib <= r.memory_mib AND claim_gpus <= r.gpu_count
          AND (claim_memory_mib = 0 OR r.enforces_limits OR p.allow_unenforced_memory))
$$;
