-- When a heartbeat first named the job's current attempt (NULL: none has).
-- A lease no heartbeat named while its runner kept heartbeating never
-- reached the runner (its answer was lost, with the replica that had it):
-- the lease rescuer gives it back as not delivered, without charging the
-- job a try. Metadata only: no rewrite of the table.
ALTER TABLE jobs ADD COLUMN lease_heard_at timestamptz;
