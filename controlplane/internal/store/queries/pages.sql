-- name: ListEnrolmentTokens :many
-- Enrolment tokens inside the scope, newest first, with the runner that
-- used each. state: LIVE (usable now), USED, EXPIRED or REVOKED.
SELECT sqlc.embed(t), p.organisation_id, r.id AS runner_id
FROM enrolment_tokens t
JOIN pools p ON p.id = t.pool_id
LEFT JOIN runners r ON r.enrolment_token_id = t.id
WHERE (@all_orgs::boolean OR p.organisation_id = sqlc.narg('scope_org')::uuid)
  AND (sqlc.narg('pool_id')::uuid IS NULL OR t.pool_id = sqlc.narg('pool_id'))
  AND (sqlc.narg('state')::text IS NULL OR sqlc.narg('state') = CASE
        WHEN t.used_at IS NOT NULL THEN 'USED'
        WHEN t.revoked_at IS NOT NULL THEN 'REVOKED'
        WHEN t.expires_at <= now() THEN 'EXPIRED'
        ELSE 'LIVE' END)
  AND (sqlc.narg('before_at')::timestamptz IS NULL OR (t.created_at, t.id) < (sqlc.narg('before_at'), sqlc.narg('before_id')::uuid))
ORDER BY t.created_at DESC, t.id DESC
LIMIT @max_rows;

-- name: GetEnrolmentTokenForUpdate :one
SELECT sqlc.embed(t), p.organisation_id, r.id AS runner_id
FROM enrolment_tokens t
JOIN pools p ON p.id = t.pool_id
LEFT JOIN runners r ON r.enrolment_token_id = t.id
WHERE t.id = @id
  AND (@all_orgs::boolean OR p.organisation_id = sqlc.narg('scope_org')::uuid)
FOR UPDATE OF t;

-- name: RevokeEnrolmentToken :one
UPDATE enrolment_tokens SET revoked_at = now(), revoked_by = sqlc.narg('revoked_by')
WHERE id = @id AND used_at IS NULL AND revoked_at IS NULL
RETURNING *;

-- name: HoldsOfRunners :many
-- The holds of some runners, newest first: those in force, or all.
SELECT * FROM gpu_holds
WHERE runner_id = ANY(@runner_ids::uuid[])
  AND (@include_ended::boolean OR (released_at IS NULL AND until > now()))
ORDER BY runner_id, created_at DESC, id;

-- name: HoldsOfPools :many
-- The holds in force on the runners of some pools, newest first.
SELECT sqlc.embed(h), r.pool_id
FROM gpu_holds h JOIN runners r ON r.id = h.runner_id
WHERE r.pool_id = ANY(@pool_ids::uuid[])
  AND h.released_at IS NULL AND h.until > now()
ORDER BY r.pool_id, h.created_at DESC, h.id;

-- name: RunsOfRunner :many
-- A runner's ended attempts, newest first, after the (finished_at, job_id,
-- attempt) of the last one seen.
SELECT * FROM job_runs
WHERE runner_id = @runner_id AND finished_at IS NOT NULL
  AND (sqlc.narg('before_at')::timestamptz IS NULL
       OR (finished_at, job_id, attempt) < (sqlc.narg('before_at'), sqlc.narg('before_job')::uuid, sqlc.narg('before_attempt')::int))
ORDER BY finished_at DESC, job_id DESC, attempt DESC
LIMIT @max_rows;

-- name: RunsInScope :many
-- Ended attempts of the jobs inside the scope (of one organisation, or one
-- pool), newest first, after the last one seen. The walk follows
-- job_runs_finished and keeps the scope's runs: its cost follows the page
-- and how many other pools' runs lie between, never the page's number.
SELECT sqlc.embed(r), j.pool_id
FROM job_runs r
JOIN jobs j ON j.id = r.job_id
JOIN pools p ON p.id = j.pool_id
WHERE r.finished_at IS NOT NULL
  AND (@all_orgs::boolean OR p.organisation_id = sqlc.narg('scope_org')::uuid
       OR (p.organisation_id IS NULL AND j.organisation_id = sqlc.narg('scope_org')::uuid))
  AND (sqlc.narg('organisation_id')::uuid IS NULL OR coalesce(j.organisation_id, p.organisation_id) = sqlc.narg('organisation_id'))
  AND (sqlc.narg('pool_id')::uuid IS NULL OR j.pool_id = sqlc.narg('pool_id'))
  AND (sqlc.narg('before_at')::timestamptz IS NULL
       OR (r.finished_at, r.job_id, r.attempt) < (sqlc.narg('before_at'), sqlc.narg('before_job')::uuid, sqlc.narg('before_attempt')::int))
ORDER BY r.finished_at DESC, r.job_id DESC, r.attempt DESC
LIMIT @max_rows;

-- name: JobsByID :many
SELECT j.* FROM jobs j JOIN pools p ON p.id = j.pool_id
WHERE j.id = ANY(@ids::uuid[])
  AND (@all_orgs::boolean OR p.organisation_id = sqlc.narg('scope_org')::uuid
       OR (p.organisation_id IS NULL AND j.organisation_id = sqlc.narg('scope_org')::uuid));
