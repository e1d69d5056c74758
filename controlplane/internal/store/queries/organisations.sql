-- Organisation scoping lives in the WHERE clauses: a caller passes its scope
-- (all_orgs, or exactly one organisation) and cannot see past it.

-- name: CreateOrganisation :one
INSERT INTO organisations (name) VALUES (@name) RETURNING *;

-- name: ListOrganisations :many
SELECT * FROM organisations
WHERE (@all_orgs::boolean OR id = sqlc.narg('scope_org')::uuid)
ORDER BY name;

-- name: OrganisationsByIDs :many
SELECT * FROM organisations
WHERE id = ANY(@ids::uuid[])
  AND (@all_orgs::boolean OR id = sqlc.narg('scope_org')::uuid);
