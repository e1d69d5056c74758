-- The images a pool's runners pull after enrolment and before they take
-- work, so that a missing registry login or permission shows when a host
-- is set up, not when a job waits: references, each optionally pinned as
-- REFERENCE@sha256:DIGEST. What each runner has of them is in its
-- capacity report (capacity->'images').
ALTER TABLE pools ADD COLUMN images text[] NOT NULL DEFAULT '{}';
