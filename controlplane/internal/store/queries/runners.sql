-- name: CreateEnrolmentToken :one
INSERT INTO enrolment_tokens (pool_id, token_hash, created_by, expires_at)
VALUES (@pool_id, @token_hash, sqlc.narg('created_by'), @expires_at)
RETURNING *;

-- name: UseEnrolmentToken :one
-- Consumes a token: unknown, used, expired and revoked tokens all match
-- nothing.
-- The row lock makes two enrolments racing for one token take turns, and
-- the loser finds it used.
UPDATE enrolment_tokens
SET used_at = coalesce(sqlc.narg('now')::timestamptz, now())
WHERE token_hash = @token_hash
  AND used_at IS NULL
  AND revoked_at IS NULL
  AND expires_at > coalesce(sqlc.narg('now')::timestamptz, now())
RETURNING *;

-- name: CreateRunner :one
INSERT INTO runners (pool_id, name, public_key, fingerprint, csr, enrolment_token_id)
VALUES (@pool_id, @name, @public_key, @fingerprint, @csr, @enrolment_token_id)
RETURNING *;

-- name: GetRunner :one
SELECT sqlc.embed(r), p.organisation_id, p.lease_seconds AS pool_lease_seconds, p.images AS pool_images
FROM runners r JOIN pools p ON p.id = r.pool_id
WHERE r.id = @id
  AND (@all_orgs::boolean OR p.organisation_id = sqlc.narg('scope_org')::uuid);

-- name: GetRunnerForUpdate :one
-- Locks the runner: approval, rejection and revocation of one runner apply
-- one at a time, each seeing the status the last one left. NO KEY UPDATE,
-- not UPDATE: approval issues a certificate whose row references the runner
-- (a KEY SHARE lock, taken on another connection), which FOR UPDATE would
-- block until this very transaction ends.
SELECT sqlc.embed(r), p.organisation_id, p.lease_seconds AS pool_lease_seconds, p.images AS pool_images
FROM runners r JOIN pools p ON p.id = r.pool_id
WHERE r.id = @id
  AND (@all_orgs::boolean OR p.organisation_id = sqlc.narg('scope_org')::uuid)
FOR NO KEY UPDATE OF r;

-- name: ListRunners :many
-- Runners inside the scope, oldest enrolment first, a page at a time after
-- the (enrolled_at, id) of the last one seen (max_rows null: all of them).
SELECT sqlc.embed(r), p.organisation_id, p.lease_seconds AS pool_lease_seconds, p.images AS pool_images
FROM runners r JOIN pools p ON p.id = r.pool_id
WHERE (@all_orgs::boolean OR p.organisation_id = sqlc.narg('scope_org')::uuid)
  AND (sqlc.narg('pool_id')::uuid IS NULL OR r.pool_id = sqlc.narg('pool_id'))
  AND (sqlc.narg('status')::text IS NULL OR r.status = sqlc.narg('status'))
  -- A label the runner reported: key=value, or the key with any value.
  AND (sqlc.narg('label_key')::text IS NULL OR jsonb_path_exists(r.capacity, '$.labels[*] ? (@.key == $k && ($v == null || @.value == $v))',
       jsonb_build_object('k', sqlc.narg('label_key')::text, 'v', sqlc.narg('label_value')::text)))
  AND (sqlc.narg('after_at')::timestamptz IS NULL OR (r.enrolled_at, r.id) > (sqlc.narg('after_at'), sqlc.narg('after_id')::uuid))
ORDER BY r.enrolled_at, r.id
LIMIT sqlc.narg('max_rows');

-- name: SetRunnerStatus :exec
UPDATE runners
SET status = @status, status_reason = @status_reason,
    decided_at = coalesce(sqlc.narg('now')::timestamptz, now()), decided_by = sqlc.narg('decided_by')
WHERE id = @id;

-- name: InsertCertificate :exec
INSERT INTO certificates (serial, runner_id, der, not_before, not_after)
VALUES (@serial, sqlc.narg('runner_id'), @der, @not_before, @not_after)
ON CONFLICT (serial) DO NOTHING;

-- name: GetCertificate :one
SELECT * FROM certificates WHERE serial = @serial;

-- name: LatestRunnerCertificate :one
SELECT * FROM certificates
WHERE runner_id = @runner_id
  AND serial NOT IN (SELECT serial FROM certificate_revocations)
ORDER BY not_after DESC
LIMIT 1;

-- name: LatestCertificatesForRunners :many
-- Each runner's newest certificate, one index probe per runner: a runner
-- renews every two thirds of a lifetime and old certificates are kept, so
-- reading all of them (DISTINCT ON) grew with every renewal.
-- A serial revoked on its own (step ca revoke) comes with its revocation.
SELECT c.serial, c.runner_id, c.der, c.not_before, c.not_after, c.issued_at, rv.revoked_at, rv.reason AS revocation_reason
FROM unnest(@runner_ids::uuid[]) AS r (id)
CROSS JOIN LATERAL (
    SELECT * FROM certificates WHERE runner_id = r.id ORDER BY not_after DESC LIMIT 1
) c
LEFT JOIN certificate_revocations rv ON rv.serial = c.serial;

-- name: InsertRevocation :execrows
INSERT INTO certificate_revocations (serial, reason_code, reason, revoked_at, expires_at, mtls, provisioner_id)
VALUES (@serial, @reason_code, @reason, @revoked_at, sqlc.narg('expires_at'), @mtls, @provisioner_id)
ON CONFLICT (serial) DO NOTHING;

-- name: RevokeRunnerCertificates :execrows
-- Revocation by identity: every certificate of the runner that is still
-- valid becomes a revocation row too, so CRL-style checks agree.
INSERT INTO certificate_revocations (serial, reason, expires_at)
SELECT c.serial, @reason, c.not_after
FROM certificates c
WHERE c.runner_id = @runner_id AND c.not_after > now()
ON CONFLICT (serial) DO NOTHING;

-- name: CertificateStanding :one
-- What a presented certificate is worth: unknown serials are as good as
-- revoked (fail closed), and so is any certificate of a runner that is not
-- approved, whatever its serial. One row whatever the serial, the
-- certificate and its runner each looked up once.
SELECT
    (c.serial IS NOT NULL)::boolean AS known,
    EXISTS (SELECT 1 FROM certificate_revocations v WHERE v.serial = @serial) AS revoked,
    coalesce(r.status, '')::text AS runner_status,
    c.runner_id
FROM (SELECT 1) one
LEFT JOIN certificates c ON c.serial = @serial
LEFT JOIN runners r ON r.id = c.runner_id;

-- name: PruneCertificates :execrows
-- Certificates that expired more than keep_seconds ago, oldest first, at
-- most max_rows; each runner's newest stays (GraphQL shows it). Nothing
-- answers differently for it: an expired certificate fails the handshake,
-- and a serial the store does not know counts as revoked
-- (CertificateStanding). SKIP LOCKED: replicas share the work.
DELETE FROM certificates
WHERE serial IN (
    SELECT c.serial FROM certificates c
    WHERE c.not_after < now() - make_interval(secs => @keep_seconds::float8)
      AND (c.runner_id IS NULL OR EXISTS (
          SELECT 1 FROM certificates n WHERE n.runner_id = c.runner_id AND n.not_after > c.not_after))
    ORDER BY c.not_after
    LIMIT @max_rows
    FOR UPDATE OF c SKIP LOCKED
);

-- name: PruneRevocations :execrows
-- Revocations whose certificate is gone (pruned above) and expired more
-- than keep_seconds ago: its serial counts as revoked without them.
-- Revocations without an expiry stay.
DELETE FROM certificate_revocations
WHERE serial IN (
    SELECT v.serial FROM certificate_revocations v
    WHERE v.expires_at < now() - make_interval(secs => @keep_seconds::float8)
      AND NOT EXISTS (SELECT 1 FROM certificates c WHERE c.serial = v.serial)
    LIMIT @max_rows
    FOR UPDATE OF v SKIP LOCKED
);
