-- Runner identity: single-use enrolment tokens, runners awaiting or holding
-- approval, and every certificate the CA issued or revoked.

CREATE TABLE enrolment_tokens (
    id         uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    pool_id    uuid        NOT NULL REFERENCES pools (id),
    -- SHA-256 of the token; the token itself is shown once and never stored.
    token_hash bytea       NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    created_by uuid        REFERENCES admins (id),
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    used_at    timestamptz
);

CREATE TABLE runners (
    id           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    -- The organisation comes from the pool, never from the runner.
    pool_id      uuid        NOT NULL REFERENCES pools (id),
    name         text        NOT NULL CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'),
    status       text        NOT NULL DEFAULT 'PENDING'
                             CHECK (status IN ('PENDING', 'APPROVED', 'REJECTED', 'REVOKED')),
    status_reason text       NOT NULL DEFAULT '',
    -- The raw Ed25519 public key. One key, one runner: a key that was
    -- rejected or revoked cannot come back under a new id.
    public_key   bytea       NOT NULL UNIQUE CHECK (length(public_key) = 32),
    fingerprint  text        NOT NULL,
    csr          bytea       NOT NULL,
    enrolment_token_id uuid  NOT NULL UNIQUE REFERENCES enrolment_tokens (id),
    enrolled_at  timestamptz NOT NULL DEFAULT now(),
    decided_at   timestamptz,
    decided_by   uuid        REFERENCES admins (id)
);

CREATE INDEX runners_pool_id ON runners (pool_id);
-- Two live runners of a pool may not share a name; a revoked or rejected
-- one gives its name back.
CREATE UNIQUE INDEX runners_live_name ON runners (pool_id, name) WHERE status IN ('PENDING', 'APPROVED');

CREATE TABLE certificates (
    -- Decimal serial, as step-ca writes it.
    serial     text        PRIMARY KEY,
    -- NULL for the server's own listener certificates.
    runner_id  uuid        REFERENCES runners (id),
    der        bytea       NOT NULL,
    not_before timestamptz NOT NULL,
    not_after  timestamptz NOT NULL,
    issued_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX certificates_runner ON certificates (runner_id, not_after DESC);

CREATE TABLE certificate_revocations (
    serial         text        PRIMARY KEY,
    reason_code    integer     NOT NULL DEFAULT 0,
    reason         text        NOT NULL DEFAULT '',
    revoked_at     timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz,
    mtls           boolean     NOT NULL DEFAULT false,
    provisioner_id text        NOT NULL DEFAULT ''
);
