-- name: CreateAdmin :one
INSERT INTO admins (name, role, organisation_id, created_by)
VALUES (@name, @role, sqlc.narg('organisation_id'), sqlc.narg('created_by'))
RETURNING *;

-- name: CreateAdminToken :one
INSERT INTO admin_tokens (admin_id, token_hash, expires_at)
VALUES (@admin_id, @token_hash, sqlc.narg('expires_at'))
RETURNING *;

-- name: AdminByTokenHash :one
-- The principal behind a bearer token. Expired and revoked tokens find
-- nothing, exactly like unknown ones, so callers cannot tell them apart.
SELECT a.*
FROM admin_tokens t
JOIN admins a ON a.id = t.admin_id
WHERE t.token_hash = @token_hash
  AND t.revoked_at IS NULL
  AND (t.expires_at IS NULL OR t.expires_at > coalesce(sqlc.narg('now')::timestamptz, now()));

-- name: CountAdmins :one
SELECT count(*) FROM admins;

-- name: LockAdmins :exec
-- SHARE ROW EXCLUSIVE conflicts with itself and with inserts: two
-- bootstraps cannot both see an empty table.
LOCK TABLE admins IN SHARE ROW EXCLUSIVE MODE;
