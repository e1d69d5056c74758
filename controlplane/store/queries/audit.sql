-- name: InsertAudit :one
INSERT INTO audit_log (actor_id, actor_name, actor_role, organisation_id, action, outcome, detail)
VALUES (sqlc.narg('actor_id'), @actor_name, @actor_role, sqlc.narg('organisation_id'), @action, @outcome, @detail)
RETURNING *;

-- name: ListAudit :many
-- Keyset pagination, newest first: before_id is the last id the caller saw.
SELECT * FROM audit_log
WHERE (sqlc.narg('before_id')::bigint IS NULL OR id < sqlc.narg('before_id'))
ORDER BY id DESC
LIMIT @max_rows;
