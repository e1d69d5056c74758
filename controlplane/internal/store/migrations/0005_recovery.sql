-- The survivor check a runner's agent sends after every start (its recovery
-- proof, runnerapi.RecoveryProof as JSON): leases go only to the agent
-- instance it names, and only when it claims the runner isolated.
ALTER TABLE runners
    ADD COLUMN recovery    jsonb,
    ADD COLUMN recovery_at timestamptz;
