-- Placement by labels, and the preference for the runner that strands
-- least.
--
-- A job's label selector is kept in its options (options->'selector': an
-- array of requirements {key, op, values}, runnerapi.Requirement). It is
-- matched against the runner's labels, detected and declared, as its
-- capacity report has them; labels is that list as one object, kept by
-- PostgreSQL from capacity so that the claim and the blocked check read
-- it without walking the report.

CREATE FUNCTION runmesh_labels(capacity jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(jsonb_object_agg(l->>'key', coalesce(l->>'value', '')), '{}'::jsonb)
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(capacity->'labels') = 'array' THEN capacity->'labels' ELSE '[]'::jsonb END) l
    WHERE jsonb_typeof(l->'key') = 'string'
$$;

-- Whether labels (an object) meet every requirement of selector (an array;
-- NULL selects every runner). A runner without the key meets != and notin,
-- as in Kubernetes. An operator it does not know meets nothing.
CREATE FUNCTION runmesh_selects(selector jsonb, labels jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT selector IS NULL OR NOT EXISTS (
        SELECT 1 FROM jsonb_array_elements(selector) q
        WHERE NOT coalesce(CASE q->>'op'
            WHEN '='       THEN labels->>(q->>'key') = q->'values'->>0
            WHEN '!='      THEN labels->>(q->>'key') IS DISTINCT FROM q->'values'->>0
            WHEN 'in'      THEN (q->'values') ? (labels->>(q->>'key'))
            WHEN 'notin'   THEN NOT labels ? (q->>'key') OR NOT (q->'values') ? (labels->>(q->>'key'))
            WHEN 'exists'  THEN labels ? (q->>'key')
            WHEN '!exists' THEN NOT labels ? (q->>'key')
        END, false))
$$;

ALTER TABLE runners
    ADD COLUMN labels jsonb GENERATED ALWAYS AS (runmesh_labels(capacity)) STORED,
    -- The job kinds the runner asked for last (NULL until it asks): the
    -- blocked check's, since a runner names its kinds in each request.
    ADD COLUMN kinds  text[];

-- The runners waiting for work now (a long poll whose claim found none):
-- until when, the room each has (what a job would leave stranded there)
-- and the bounds its claim takes jobs within. Another runner's claim
-- passes over a job that a waiting runner with less room would take, so
-- that runner gets it. Written by the claims themselves: an empty claim
-- records its runner here, one that leases (or will not wait) removes it.
-- Unlogged: what it says lasts seconds, and a claim that finds nothing
-- writes no WAL for it, so it waits for no flush; a crash empties it,
-- which only means that nobody is waiting.
CREATE UNLOGGED TABLE runner_waits (
    runner_id      uuid             PRIMARY KEY,
    pool_id        uuid             NOT NULL,
    until          timestamptz      NOT NULL,
    gpus           integer          NOT NULL,
    cores          double precision NOT NULL,
    memory_mib     bigint           NOT NULL,
    max_gpus       integer          NOT NULL,
    max_cores      double precision NOT NULL,
    max_memory_mib bigint           NOT NULL,
    kinds          text[]           NOT NULL,
    unavailable    text[]           NOT NULL
);
CREATE INDEX runner_waits_pool ON runner_waits (pool_id);

-- runmesh_placement (0015) with the runners' labels and kinds, for the
-- blocked check's kind and selector rules.
CREATE OR REPLACE VIEW runmesh_placement AS
SELECT r.pool_id, r.cores, r.memory_mib, r.gpu_count, (r.enforces_limits OR p.allow_unenforced_memory) AS memory_ok,
       r.labels, r.kinds
FROM runners r JOIN pools p ON p.id = r.pool_id
WHERE r.status = 'APPROVED' AND r.retired_at IS NULL;
