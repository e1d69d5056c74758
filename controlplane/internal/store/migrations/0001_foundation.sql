-- Organisations, the admins who act for them, their bearer tokens, compute
-- pools and the audit log. Every later migration builds on these.

CREATE TABLE organisations (
    id         uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    -- A short, stable handle used in URLs, labels and metrics.
    name       text        NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE admins (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    name            text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    role            text        NOT NULL CHECK (role IN ('PLATFORM_ADMIN', 'ORG_ADMIN', 'ORG_MEMBER')),
    organisation_id uuid        REFERENCES organisations (id),
    created_by      uuid        REFERENCES admins (id),
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- Platform admins belong to no organisation; everyone else to exactly one.
    CHECK ((role = 'PLATFORM_ADMIN') = (organisation_id IS NULL))
);

-- Tokens are 256-bit random secrets: a SHA-256 digest is enough to store them,
-- and lets a lookup be one index probe.
CREATE TABLE admin_tokens (
    id           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    admin_id     uuid        NOT NULL REFERENCES admins (id),
    token_hash   bytea       NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    revoked_at   timestamptz
);

CREATE TABLE pools (
    id                  uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    -- NULL: the platform's own pool.
    organisation_id     uuid        REFERENCES organisations (id),
    name                text        NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    -- NULL means "use the default"; the defaults live in the server, so a
    -- changed default applies to every pool that never chose its own.
    lease_seconds       integer     CHECK (lease_seconds BETWEEN 5 AND 3600),
    queue_timeout_hours integer     CHECK (queue_timeout_hours BETWEEN 1 AND 8760),
    created_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE NULLS NOT DISTINCT (organisation_id, name)
);

CREATE INDEX pools_organisation_id ON pools (organisation_id);

CREATE TABLE audit_log (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at              timestamptz NOT NULL DEFAULT now(),
    actor_id        uuid        REFERENCES admins (id),
    actor_name      text        NOT NULL,
    actor_role      text        NOT NULL,
    -- The organisation the actor acted for (NULL for platform admins).
    organisation_id uuid,
    action          text        NOT NULL,
    outcome         text        NOT NULL,
    detail          jsonb       NOT NULL DEFAULT '{}'
);

CREATE INDEX audit_log_at ON audit_log (at DESC, id DESC);
