-- The runners that could hold a claim, empty, for the sweeper's blocked
-- and unblocked checks: approved and not retired, with what they have, and
-- whether a memory claim may go to them (they enforce memory limits, or
-- their pool allows otherwise). Runners that are merely busy, offline or
-- draining still could, later. One definition instead of a copy in each
-- check; a view, so that the planner sees through it (a function holding a
-- subquery would run once per job).
CREATE VIEW runmesh_placement AS
SELECT r.pool_id, r.cores, r.memory_mib, r.gpu_count, (r.enforces_limits OR p.allow_unenforced_memory) AS memory_ok
FROM runners r JOIN pools p ON p.id = r.pool_id
WHERE r.status = 'APPROVED' AND r.retired_at IS NULL;
