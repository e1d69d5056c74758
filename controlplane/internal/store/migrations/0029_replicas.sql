-- Server replicas, each where the others can reach its runner listener.
-- A replica writes its row when it starts and every few seconds after;
-- one not seen for a while is gone (a crashed replica leaves its row,
-- which nobody then asks). Replicas find each other here and then talk
-- directly, over mutual TLS: nothing of a session passes through the
-- database.
CREATE TABLE replicas (
    id         uuid        PRIMARY KEY,
    relay_url  text        NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at    timestamptz NOT NULL DEFAULT now()
);
