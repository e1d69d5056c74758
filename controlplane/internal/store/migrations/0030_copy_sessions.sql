-- runmesh cp is a session of its own kind: a tar stream through the
-- container engine's archive API, no longer two execs.
ALTER TABLE job_sessions DROP CONSTRAINT job_sessions_kind_check;
ALTER TABLE job_sessions ADD CONSTRAINT job_sessions_kind_check CHECK (kind IN ('attach', 'exec', 'cp'));
