-- The faults (a critical XID, an uncorrectable ECC error) the server holds
-- against a runner's GPUs, as a JSON array of runnerapi.GPUFault, one per
-- GPU. A GPU listed here is out of placement until an administrator clears
-- it, whatever a restarted agent reports; clearing it is in the audit log.
-- A column of the runner, not a table: the heartbeat handler has the
-- runner (cached, refreshed on runmesh_runner_status) and needs no
-- statement more to know them.
ALTER TABLE runners ADD COLUMN gpu_faults jsonb NOT NULL DEFAULT '[]';
