-- name: CreatePool :one
INSERT INTO pools (organisation_id, name, lease_seconds, queue_timeout_hours, allow_unenforced_memory, allow_network, images)
VALUES (sqlc.narg('organisation_id'), @name, sqlc.narg('lease_seconds'), sqlc.narg('queue_timeout_hours'), @allow_unenforced_memory, @allow_network,
        @images::text[])
RETURNING *;

-- name: ListPools :many
-- only_platform / filter_org narrow the list; all_orgs / scope_org bound
-- it: an organisation sees its pools and the platform's, which it may
-- submit to.
SELECT * FROM pools
WHERE (@all_orgs::boolean OR organisation_id = sqlc.narg('scope_org')::uuid OR (organisation_id IS NULL AND sqlc.narg('scope_org')::uuid IS NOT NULL))
  AND (NOT @only_platform::boolean OR organisation_id IS NULL)
  AND (sqlc.narg('filter_org')::uuid IS NULL OR organisation_id = sqlc.narg('filter_org'))
-- Platform pools first, then by organisation name: a stable order people can read.
ORDER BY (SELECT o.name FROM organisations o WHERE o.id = pools.organisation_id) NULLS FIRST, name;

-- name: GetPool :one
SELECT * FROM pools
WHERE id = @id
  AND (@all_orgs::boolean OR organisation_id = sqlc.narg('scope_org')::uuid);

-- name: GetPoolForUpdate :one
-- Row lock: two concurrent updates of one pool apply one after the other
-- instead of the later silently overwriting a field the earlier changed.
SELECT * FROM pools
WHERE id = @id
  AND (@all_orgs::boolean OR organisation_id = sqlc.narg('scope_org')::uuid)
FOR UPDATE;

-- name: UpdatePool :one
UPDATE pools
SET name = @name,
    lease_seconds = sqlc.narg('lease_seconds'),
    queue_timeout_hours = sqlc.narg('queue_timeout_hours'),
    allow_unenforced_memory = @allow_unenforced_memory,
    allow_network = @allow_network,
    images = @images::text[]
WHERE id = @id
RETURNING *;

-- name: PoolsByOrganisations :many
SELECT * FROM pools
WHERE organisation_id = ANY(@organisation_ids::uuid[])
ORDER BY name;

-- name: PoolsByIDs :many
-- The pools of jobs and runners read in scope: an organisation's, and the
-- platform's it submitted to.
SELECT * FROM pools
WHERE id = ANY(@ids::uuid[])
  AND (@all_orgs::boolean OR organisation_id = sqlc.narg('scope_org')::uuid OR (organisation_id IS NULL AND sqlc.narg('scope_org')::uuid IS NOT NULL));

-- name: GetUsablePool :one
-- A pool the scope may see and submit to: its own, or the platform's. (GetPool
-- is a pool the scope manages.)
SELECT * FROM pools
WHERE id = @id
  AND (@all_orgs::boolean OR organisation_id = sqlc.narg('scope_org')::uuid OR (organisation_id IS NULL AND sqlc.narg('scope_org')::uuid IS NOT NULL));
