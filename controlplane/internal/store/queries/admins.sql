-- name: CreateAdmin :one
INSERT INTO admins (name, role, organisation_id, created_by)
VALUES (@name, @role, sqlc.narg('organisation_id'), sqlc.narg('created_by'))
RETURNING *;

-- name: CreateAdminToken :one
INSERT INTO admin_tokens (admin_id, token_hash, expires_at)
VALUES (@admin_id, @token_hash, sqlc.narg('expires_at'))
RETURNING *;

-- name: AdminByTokenHash :one
-- The principal behind a bearer token, and the token's id. Expired and
-- revoked tokens find nothing, exactly like unknown ones, so callers cannot
-- tell them apart. The same statement notes when the token was used, at
-- most once a minute: a list of tokens shows it, and a token busy with
-- requests costs one row write a minute, not one a request.
WITH hit AS (
    SELECT t.id, t.admin_id, t.last_used_at
    FROM admin_tokens t
    WHERE t.token_hash = @token_hash
      AND t.revoked_at IS NULL
      AND (t.expires_at IS NULL OR t.expires_at > coalesce(sqlc.narg('now')::timestamptz, now()))
), touched AS (
    UPDATE admin_tokens u SET last_used_at = now()
    FROM hit
    WHERE u.id = hit.id AND (hit.last_used_at IS NULL OR hit.last_used_at < now() - interval '1 minute')
)
SELECT sqlc.embed(a), hit.id AS token_id
FROM hit JOIN admins a ON a.id = hit.admin_id;

-- name: CountAdmins :one
SELECT count(*) FROM admins;

-- name: LockAdmins :exec
-- SHARE ROW EXCLUSIVE conflicts with itself and with inserts: two
-- bootstraps cannot both see an empty table.
LOCK TABLE admins IN SHARE ROW EXCLUSIVE MODE;

-- name: ListAdmins :many
-- Admins inside the scope, oldest first, a page at a time after the
-- (created_at, id) of the last one seen.
SELECT * FROM admins
WHERE (@all_orgs::boolean OR organisation_id = sqlc.narg('scope_org')::uuid)
  AND (sqlc.narg('organisation_id')::uuid IS NULL OR organisation_id = sqlc.narg('organisation_id'))
  AND (sqlc.narg('after_at')::timestamptz IS NULL OR (created_at, id) > (sqlc.narg('after_at'), sqlc.narg('after_id')::uuid))
ORDER BY created_at, id
LIMIT @max_rows;

-- name: CountAdminsInScope :one
SELECT count(*) FROM admins
WHERE (@all_orgs::boolean OR organisation_id = sqlc.narg('scope_org')::uuid)
  AND (sqlc.narg('organisation_id')::uuid IS NULL OR organisation_id = sqlc.narg('organisation_id'));

-- name: TokensOfAdmins :many
SELECT * FROM admin_tokens WHERE admin_id = ANY(@admin_ids::uuid[])
ORDER BY admin_id, created_at, id;

-- name: GetAdminTokenForUpdate :one
-- A token with the admin it belongs to, locked: two revocations of one
-- token take turns, and the second finds it revoked.
SELECT sqlc.embed(t), sqlc.embed(a)
FROM admin_tokens t JOIN admins a ON a.id = t.admin_id
WHERE t.id = @id
  AND (@all_orgs::boolean OR a.organisation_id = sqlc.narg('scope_org')::uuid)
FOR UPDATE OF t;

-- name: RevokeAdminToken :one
UPDATE admin_tokens SET revoked_at = now(), revoked_by = sqlc.narg('revoked_by')
WHERE id = @id AND revoked_at IS NULL
RETURNING *;

-- name: GetAdmin :one
SELECT * FROM admins
WHERE id = @id AND (@all_orgs::boolean OR organisation_id = sqlc.narg('scope_org')::uuid);

-- name: AdminsByID :many
SELECT * FROM admins
WHERE id = ANY(@ids::uuid[]) AND (@all_orgs::boolean OR organisation_id = sqlc.narg('scope_org')::uuid);
