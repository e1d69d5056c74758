-- name: InsertAudit :one
INSERT INTO audit_log (actor_id, actor_name, actor_role, organisation_id, action, outcome, detail)
VALUES (sqlc.narg('actor_id'), @actor_name, @actor_role, sqlc.narg('organisation_id'), @action, @outcome, @detail)
RETURNING *;

-- name: ListAudit :many
-- Keyset pagination, newest first: before_id is the last id the caller saw.
SELECT * FROM audit_log
WHERE (sqlc.narg('before_id')::bigint IS NULL OR id < sqlc.narg('before_id'))
  AND (sqlc.narg('action')::text IS NULL OR action = sqlc.narg('action'))
  AND (sqlc.narg('actor_id')::uuid IS NULL OR actor_id = sqlc.narg('actor_id'))
ORDER BY id DESC
LIMIT @max_rows;

-- name: PruneAudit :execrows
-- Entries written more than keep_seconds ago (by the database's clock),
-- oldest first, at most max_rows; SKIP LOCKED lets replicas share the work.
DELETE FROM audit_log
WHERE id IN (
    SELECT id FROM audit_log
    WHERE at < now() - make_interval(secs => @keep_seconds::float8)
    ORDER BY at, id
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
);
