-- name: JobByIdempotencyKey :one
-- A key is its submitter's (see jobs_idempotency_by_submitter).
SELECT * FROM jobs
WHERE pool_id = @pool_id AND idempotency_key = @idempotency_key
  AND organisation_id IS NOT DISTINCT FROM sqlc.narg('organisation_id')::uuid;

-- name: InsertJobEvent :exec
INSERT INTO job_events (job_id, type, attempt, runner_id, detail)
VALUES (@job_id, @type, @attempt, sqlc.narg('runner_id'), @detail);

-- name: GetJob :one
SELECT j.* FROM jobs j JOIN pools p ON p.id = j.pool_id
WHERE j.id = @id
  -- An organisation's jobs: those of its pools, and those it submitted to
  -- the platform's.
  AND (@all_orgs::boolean OR p.organisation_id = sqlc.narg('scope_org')::uuid
       OR (p.organisation_id IS NULL AND j.organisation_id = sqlc.narg('scope_org')::uuid));

-- name: GetJobForUpdate :one
SELECT j.* FROM jobs j JOIN pools p ON p.id = j.pool_id
WHERE j.id = @id
  -- An organisation's jobs: those of its pools, and those it submitted to
  -- the platform's.
  AND (@all_orgs::boolean OR p.organisation_id = sqlc.narg('scope_org')::uuid
       OR (p.organisation_id IS NULL AND j.organisation_id = sqlc.narg('scope_org')::uuid))
FOR UPDATE OF j;

-- name: ListJobs :many
-- Every pool's jobs, newest first by id: ids are UUIDv7, in submission
-- order, and the primary key read backwards stops at the limit. (By
-- submitted_at, which no index orders, every list read and sorted the
-- whole table.) A page starts below before_id, the last id seen; min_id
-- and max_id bound the walk to the ids of the submission window, which
-- submitted_after and submitted_before then keep exact.
SELECT * FROM jobs
WHERE (sqlc.narg('state')::text IS NULL OR state = sqlc.narg('state'))
  AND (sqlc.narg('before_id')::uuid IS NULL OR id < sqlc.narg('before_id'))
  AND (sqlc.narg('min_id')::uuid IS NULL OR id >= sqlc.narg('min_id'))
  AND (sqlc.narg('max_id')::uuid IS NULL OR id < sqlc.narg('max_id'))
  AND (sqlc.narg('kind')::text IS NULL OR kind = sqlc.narg('kind'))
  AND (sqlc.narg('submitted_after')::timestamptz IS NULL OR submitted_at >= sqlc.narg('submitted_after'))
  AND (sqlc.narg('submitted_before')::timestamptz IS NULL OR submitted_at < sqlc.narg('submitted_before'))
ORDER BY id DESC
LIMIT @max_rows;

-- name: ListJobsInPools :many
-- The jobs of one pool, or of one organisation's pools, newest first. Each
-- pool gives its newest, and the newest of those win: the cost follows the
-- pools and the limit, not the jobs of other pools (which a walk of the
-- primary key would step through). Held jobs come from jobs_leases (they
-- are few: what the fleet runs), all others from jobs_pool, which leaves
-- them out so that leases and heartbeats, which rewrite held jobs, write
-- nothing to it.
SELECT j.* FROM pools p
CROSS JOIN LATERAL (
    (SELECT * FROM jobs
     -- The pool as a range and in the order: with an equality the planner
     -- drops the pool from the order and may walk the primary key instead,
     -- past every other pool's jobs (it guesses each pool holds an even
     -- share). Only jobs_pool gives this order.
     WHERE jobs.pool_id >= p.id AND jobs.pool_id <= p.id
       AND (jobs.finished_at IS NOT NULL OR jobs.state = 'QUEUED' OR jobs.state = 'BLOCKED')
       AND (sqlc.narg('state')::text IS NULL OR jobs.state = sqlc.narg('state'))
       AND (sqlc.narg('before_id')::uuid IS NULL OR jobs.id < sqlc.narg('before_id'))
       AND (sqlc.narg('min_id')::uuid IS NULL OR jobs.id >= sqlc.narg('min_id'))
       AND (sqlc.narg('max_id')::uuid IS NULL OR jobs.id < sqlc.narg('max_id'))
       AND (sqlc.narg('kind')::text IS NULL OR jobs.kind = sqlc.narg('kind'))
       AND (sqlc.narg('submitted_after')::timestamptz IS NULL OR jobs.submitted_at >= sqlc.narg('submitted_after'))
       AND (sqlc.narg('submitted_before')::timestamptz IS NULL OR jobs.submitted_at < sqlc.narg('submitted_before'))
     ORDER BY jobs.pool_id DESC, jobs.id DESC
     LIMIT @max_rows)
    UNION ALL
    (SELECT * FROM jobs
     WHERE jobs.pool_id = p.id AND (jobs.state = 'LEASED' OR jobs.state = 'RUNNING')
       AND (sqlc.narg('state')::text IS NULL OR jobs.state = sqlc.narg('state'))
       AND (sqlc.narg('before_id')::uuid IS NULL OR jobs.id < sqlc.narg('before_id'))
       AND (sqlc.narg('min_id')::uuid IS NULL OR jobs.id >= sqlc.narg('min_id'))
       AND (sqlc.narg('max_id')::uuid IS NULL OR jobs.id < sqlc.narg('max_id'))
       AND (sqlc.narg('kind')::text IS NULL OR jobs.kind = sqlc.narg('kind'))
       AND (sqlc.narg('submitted_after')::timestamptz IS NULL OR jobs.submitted_at >= sqlc.narg('submitted_after'))
       AND (sqlc.narg('submitted_before')::timestamptz IS NULL OR jobs.submitted_at < sqlc.narg('submitted_before'))
     ORDER BY jobs.id DESC
     LIMIT @max_rows)
) j
WHERE (@all_orgs::boolean OR p.organisation_id = sqlc.narg('scope_org')::uuid)
  AND (sqlc.narg('pool_id')::uuid IS NULL OR p.id = sqlc.narg('pool_id'))
ORDER BY j.id DESC
LIMIT @max_rows;

-- name: ListJobsSubmittedBy :many
-- An organisation's jobs in platform pools (of one, or of all), newest
-- first, through jobs_submitter: what ListJobsInPools gives of its own
-- pools, an organisation's job list has of these too.
SELECT * FROM jobs
WHERE organisation_id = @organisation_id
  AND (sqlc.narg('pool_id')::uuid IS NULL OR pool_id = sqlc.narg('pool_id'))
  AND (sqlc.narg('state')::text IS NULL OR state = sqlc.narg('state'))
  AND (sqlc.narg('before_id')::uuid IS NULL OR id < sqlc.narg('before_id'))
  AND (sqlc.narg('min_id')::uuid IS NULL OR id >= sqlc.narg('min_id'))
  AND (sqlc.narg('max_id')::uuid IS NULL OR id < sqlc.narg('max_id'))
  AND (sqlc.narg('kind')::text IS NULL OR kind = sqlc.narg('kind'))
  AND (sqlc.narg('submitted_after')::timestamptz IS NULL OR submitted_at >= sqlc.narg('submitted_after'))
  AND (sqlc.narg('submitted_before')::timestamptz IS NULL OR submitted_at < sqlc.narg('submitted_before'))
ORDER BY organisation_id DESC, id DESC
LIMIT @max_rows;

-- name: SetJobState :exec
UPDATE jobs
SET state = @state, state_reason = @state_reason,
    runner_id = CASE WHEN @state IN ('LEASED', 'RUNNING') THEN runner_id END,
    lease_expires_at = CASE WHEN @state IN ('LEASED', 'RUNNING') THEN lease_expires_at END,
    finished_at = CASE WHEN @state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'EXPIRED') THEN now() END
WHERE id = @id;

-- name: RequestCancel :exec
UPDATE jobs SET cancel_requested = true WHERE id = @id;

-- name: ClaimJobs :many
-- Leases the best queued jobs that fit the runner, together, in one
-- statement. The runner must be approved, not quarantined, draining or
-- retired. Each job must fit the largest job the runner asked for, and its
-- kind must be one the runner runs; all of them together must fit what the
-- runner has (minus what its held jobs book and, for GPUs, its holds) and
-- the free room it reported, taken best first, with no more held at
-- once than max_held, and their specs (image,
-- command and env as text, at least what the submission counted) must fit
-- max_spec_bytes, which bounds the answer. A memory claim needs a runner
-- that enforces memory limits, unless the pool says otherwise; an
-- interactive job (TTY, PIPE), an agent that named its mode.
-- SKIP LOCKED lets concurrent claimers (other runners, other replicas) pass
-- over rows another claim is taking instead of waiting on them; the winner
-- moves them out of QUEUED, so no job is leased twice. (FOR UPDATE cannot
-- share a SELECT with a window function: the running totals are taken over
-- the locked candidates in a second step.) Each leased job's LEASED event
-- is written by the same statement: no round trip more while its rows are
-- locked. Its run is written when the attempt ends; until then the job row
-- is the record of it (runner, attempt, leased_at).
WITH r AS (
    SELECT ru.id, ru.pool_id, ru.cores, ru.memory_mib, ru.gpus_healthy, ru.enforces_limits, ru.labels,
           p.allow_unenforced_memory, coalesce(p.lease_seconds, @default_lease_seconds::int) AS lease_seconds
    FROM runners ru JOIN pools p ON p.id = ru.pool_id
    WHERE ru.id = @runner_id AND ru.status = 'APPROVED' AND ru.quarantined_at IS NULL
      AND NOT ru.draining AND ru.retired_at IS NULL
),
-- A job has a runner exactly while it is LEASED or RUNNING (the table's
-- CHECK), so runner_id alone finds what the runner holds. Naming the
-- states too let the planner AND the jobs_runner and jobs_leases indexes
-- as bitmaps, which read every dead entry since the last vacuum (thousands
-- in a busy minute) instead of skipping those an index scan marked dead.
booked AS (
    SELECT coalesce(sum(cores), 0)::float8 AS cores, coalesce(sum(memory_mib), 0)::bigint AS memory_mib,
           coalesce(sum(gpus), 0)::int AS gpus, count(*)::int AS held
    FROM jobs WHERE runner_id = @runner_id
),
held AS (
    SELECT coalesce(sum(gpus), 0)::int AS gpus FROM gpu_holds
    WHERE runner_id = @runner_id AND released_at IS NULL AND until > coalesce(sqlc.narg('now')::timestamptz, now())
),
room AS (
    SELECT least(r.cores - booked.cores, @free_cores::float8) AS cores,
           least(r.memory_mib - booked.memory_mib, @free_memory_mib::bigint) AS memory_mib,
           least(r.gpus_healthy - booked.gpus - held.gpus, @free_gpus::int) AS gpus
    FROM r, booked, held
),
-- What one job may take here: the room, within the largest job the runner
-- asked for. A runner that cannot enforce memory limits, in a pool that
-- does not allow that, takes no memory claim: its memory bound is 0.
bounds AS (
    SELECT least(room.gpus, @max_gpus::int) AS gpus, least(room.cores, @max_cores::float8) AS cores,
           CASE WHEN r.enforces_limits OR r.allow_unenforced_memory THEN least(room.memory_mib, @max_memory_mib::bigint) ELSE 0 END
               AS memory_mib
    FROM r, room
),
-- The runners of the pool waiting for work now (runner_waits, written
-- below by their own claims) that have less room than this one, GPUs
-- first, then cores, then memory: a job one of them would take is left to
-- it, since it strands less there. Runners with as much room as this one
-- strand as much: none waits for another. Read once, not for each job.
better AS MATERIALIZED (
    SELECT o.labels, w.max_gpus AS gpus, w.max_cores AS cores, w.max_memory_mib AS memory_mib, w.kinds, w.unavailable
    FROM runner_waits w JOIN runners o ON o.id = w.runner_id, r, room
    WHERE w.pool_id = r.pool_id AND w.runner_id <> r.id AND w.until > coalesce(sqlc.narg('now')::timestamptz, now())
      AND o.status = 'APPROVED' AND o.quarantined_at IS NULL AND NOT o.draining AND o.retired_at IS NULL
      AND (w.gpus, w.cores, w.memory_mib) < (room.gpus, room.cores, room.memory_mib)
),
candidates AS (
    SELECT j.id, j.cores, j.memory_mib, j.gpus, j.priority, j.submitted_at,
           octet_length(j.image) + octet_length(j.command::text) + octet_length(j.env::text) AS spec_bytes
    FROM jobs j
    -- Scalars, not join columns: with the pool fixed the planner walks
    -- jobs_queued in the ORDER BY's order and stops at the LIMIT. Joined,
    -- it read and sorted the whole queue.
    -- The bounds on GPUs, memory, cores and backoff are scalars too, so
    -- the index itself passes over jobs that do not fit or must wait
    -- (migration 0018) instead of the rows being fetched to be refused.
    WHERE j.pool_id = (SELECT pool_id FROM r) AND j.state = 'QUEUED'
      AND j.gpus <= (SELECT gpus FROM bounds)
      AND j.memory_mib <= (SELECT memory_mib FROM bounds)
      AND j.cores <= (SELECT cores FROM bounds)
      AND j.available_at <= coalesce(sqlc.narg('now')::timestamptz, now())
      -- Kinds as a range the index checks (exact for one kind, as most
      -- runners run), then exactly on the row. An = ANY on an index column
      -- after the first lets PostgreSQL plan an unordered scan and sort
      -- the whole queue instead.
      AND j.kind >= (SELECT min(k) FROM unnest(@kinds::text[]) AS k)
      AND j.kind <= (SELECT max(k) FROM unnest(@kinds::text[]) AS k)
      AND j.kind = ANY(@kinds::text[])
      -- Images the runner cannot run now (its pool's, not pulled yet or
      -- refused): checked on the row, after the index; an empty list
      -- (nearly always) costs nothing.
      AND (cardinality(@unavailable_images::text[]) = 0 OR j.image <> ALL(@unavailable_images::text[]))
      -- The job's label selector, against this runner's labels (on the
      -- row too; a job without one, nearly every job, costs a NULL test).
      AND (j.options->'selector' IS NULL OR runmesh_selects(j.options->'selector', (SELECT labels FROM r)))
      -- An interactive job (TTY, PIPE) only to an agent that named its
      -- mode: an older one would run it as a batch job. (A batch job has
      -- no stdio in its options: a NULL test on the row.)
      AND (j.options->'stdio' IS NULL OR j.options->>'stdio' = ANY(@stdio::text[]))
      -- Left to a waiting runner that strands less and would take it. Not
      -- an interactive job: whether a waiting runner's agent runs its mode
      -- is not recorded, and one that does not would never take it.
      AND NOT EXISTS (
          SELECT 1 FROM better b
          WHERE j.options->'stdio' IS NULL
            AND j.gpus <= b.gpus AND j.memory_mib <= b.memory_mib AND j.cores <= b.cores AND j.kind = ANY(b.kinds)
            AND (cardinality(b.unavailable) = 0 OR j.image <> ALL(b.unavailable))
            AND (j.options->'selector' IS NULL OR runmesh_selects(j.options->'selector', b.labels)))
    ORDER BY j.priority DESC, j.submitted_at, j.id
    -- At most max_held leases at once: a heartbeat names all it holds.
    LIMIT least(sqlc.arg(max_jobs)::int, greatest(sqlc.arg(max_held)::int - (SELECT held FROM booked), 0))
    FOR UPDATE OF j SKIP LOCKED
),
fitting AS (
    SELECT c.id
    FROM (SELECT c.*,
                 sum(c.cores) OVER w AS cores_sum, sum(c.memory_mib) OVER w AS memory_sum, sum(c.gpus) OVER w AS gpus_sum,
                 sum(c.spec_bytes) OVER w AS spec_sum
          FROM candidates c
          WINDOW w AS (ORDER BY c.priority DESC, c.submitted_at, c.id)) c, room
    WHERE c.cores_sum <= room.cores AND c.memory_sum <= room.memory_mib AND c.gpus_sum <= room.gpus
      AND c.spec_sum <= @max_spec_bytes::bigint
),
-- The jobs are found by their ids as an array, a primary key probe each.
-- Joined to fitting instead, a plan made while the table was empty walked
-- the whole table once for each job.
leased AS (
    UPDATE jobs j
    SET state = 'LEASED', attempt = j.attempt + 1, runner_id = r.id, state_reason = '',
        leased_at = coalesce(sqlc.narg('now')::timestamptz, now()), lease_heard_at = NULL,
        lease_expires_at = coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => r.lease_seconds)
    FROM r
    WHERE j.id = ANY(ARRAY(SELECT id FROM fitting))
    RETURNING j.*
),
event_rows AS (
    INSERT INTO job_events (job_id, type, attempt, runner_id)
    SELECT l.id, 'LEASED', l.attempt, l.runner_id FROM leased l
),
-- A claim that finds nothing, for a runner that will wait for work (and
-- may hold more), records that it waits: until when, its room and its
-- bounds (see better). One that leases, or will not wait, removes it.
waits AS (
    INSERT INTO runner_waits (runner_id, pool_id, until, gpus, cores, memory_mib, max_gpus, max_cores, max_memory_mib, kinds, unavailable)
    SELECT r.id, r.pool_id, coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @wait_seconds::int),
           room.gpus, room.cores, room.memory_mib, bounds.gpus, bounds.cores, bounds.memory_mib, @kinds::text[], @unavailable_images::text[]
    FROM r, room, bounds, booked
    WHERE NOT EXISTS (SELECT 1 FROM leased) AND @wait_seconds::int > 0 AND booked.held < sqlc.arg(max_held)::int
    ON CONFLICT (runner_id) DO UPDATE
    SET until = excluded.until, gpus = excluded.gpus, cores = excluded.cores, memory_mib = excluded.memory_mib,
        max_gpus = excluded.max_gpus, max_cores = excluded.max_cores, max_memory_mib = excluded.max_memory_mib,
        kinds = excluded.kinds, unavailable = excluded.unavailable
),
stopped AS (
    DELETE FROM runner_waits w
    WHERE w.runner_id = @runner_id
      AND (EXISTS (SELECT 1 FROM leased) OR @wait_seconds::int <= 0 OR (SELECT held FROM booked) >= sqlc.arg(max_held)::int)
    RETURNING w.runner_id, w.pool_id, w.gpus, w.cores, w.memory_mib
)
-- stopped_asking: the runner was waiting and has now leased jobs, and
-- runners with more room wait: they may have passed over a job for it
-- that it has no room for now, so ClaimJobs wakes the pool's waiting
-- runners to claim again.
SELECT l.*, EXISTS (
    SELECT 1 FROM stopped s JOIN runner_waits w ON w.pool_id = s.pool_id
    WHERE w.runner_id <> s.runner_id AND w.until > coalesce(sqlc.narg('now')::timestamptz, now())
      AND (w.gpus, w.cores, w.memory_mib) > (s.gpus, s.cores, s.memory_mib)) AS stopped_asking
FROM leased l ORDER BY l.priority DESC, l.submitted_at, l.id; -- best first, as the claim ranked them

-- name: TouchWorkRequest :one
-- Records that the runner asked for work, and for which kinds, and returns
-- its recovery proof. The time is a hint for takingWork (asked within
-- three minutes), so it is rewritten only once it is 30 seconds old, or
-- when the kinds changed: most requests for work write nothing and wait
-- for no WAL flush. (The SELECT sees the row as the statement began; the
-- UPDATE does not change the proof.)
WITH touched AS (
    UPDATE runners t SET last_work_request_at = now(), kinds = @kinds::text[]
    WHERE t.id = @id AND (t.last_work_request_at IS NULL OR t.last_work_request_at < now() - interval '30 seconds'
                          OR t.kinds IS DISTINCT FROM @kinds::text[])
)
SELECT r.recovery FROM runners r WHERE r.id = @id;

-- name: RecordRecovery :execrows
UPDATE runners SET recovery = @recovery, recovery_at = now() WHERE id = @id;

-- name: ExtendLeases :many
-- A heartbeat extends the leases it names that the runner still holds, at
-- the attempt it names; RUNNING is recorded when the runner says so, with
-- its event, in this one statement (heartbeats are the hot path). old is
-- the row as the statement found it, so started is true once per attempt.
-- Both readings of jobs are by the lease ids (ids, the leases' ids again)
-- as an array, a primary key probe each: joined by id alone, a plan made
-- while the table looked empty walked the whole primary key.
WITH extended AS (
    UPDATE jobs j
    SET lease_expires_at = coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @lease_seconds::int),
        state = CASE WHEN v.phase = 'RUNNING' THEN 'RUNNING' ELSE j.state END,
        lease_heard_at = coalesce(old.lease_heard_at, coalesce(sqlc.narg('now')::timestamptz, now()))
    FROM jsonb_to_recordset(@leases::jsonb) AS v (lease_id uuid, attempt int, phase text), jobs old
    WHERE j.id = ANY(@ids::uuid[]) AND j.id = v.lease_id AND j.attempt = v.attempt AND j.runner_id = @runner_id
      AND old.id = ANY(@ids::uuid[]) AND old.id = j.id
    RETURNING j.id, j.attempt, j.cancel_requested, (v.phase = 'RUNNING' AND old.state = 'LEASED')::boolean AS started
), running AS (
    INSERT INTO job_events (job_id, type, attempt, runner_id)
    SELECT id, 'RUNNING', attempt, @runner_id FROM extended WHERE started
)
SELECT id, attempt, cancel_requested, started FROM extended;

-- name: LockJobs :exec
-- Locks the jobs a batch of results ends, in one order (id) so that
-- concurrent batches cannot deadlock. ReadJobs then reads them as locked:
-- a statement after the locks sees the versions they hold.
SELECT 1 FROM jobs WHERE id = ANY(@ids::uuid[]) ORDER BY id FOR UPDATE;

-- name: ReadJobs :many
-- The jobs a batch of results ends, read without locks: FinishAttempts
-- re-checks under its own row locks what the decisions rest on. Not for
-- speed (locking every job first, with LockJobs, is no slower) but for
-- what a cancel means: one that lands while a result is decided wins,
-- and the job ends CANCELLED, where behind the result's locks it would
-- wait and then be refused as too late. Only what the
-- decisions and the fence rest on: reading out the whole rows (the specs)
-- cost both sides for nothing.
SELECT id, state, attempt, undelivered, max_attempts, runner_id, cancel_requested
FROM jobs WHERE id = ANY(@ids::uuid[]);

-- name: FinishAttempts :many
-- Fencing: only the runner holding a job at exactly the attempt may end it.
-- Anything else matches no row, and the caller answers 409 for it. Each
-- job it ends gets its run record and its event in this one statement.
-- The outcomes come as one array a field, not as a JSON document, which
-- PostgreSQL would parse and walk again for each part. An array cannot
-- hold what Go leaves nil here, so the caller sends a stand-in that is
-- never a real value: the zero time, the
-- least bigint, or an empty text (a return reason is never empty; an empty
-- digest or version says nothing). PostgreSQL takes an unnest of a
-- parameter for ten rows, so it would join the outcomes to the jobs by a
-- nested loop, comparing each with every job of the batch; the caller
-- turns nested loops off for this statement (see hashJoins). The update
-- returns the outcome with the job, so the run and the event are written
-- from its rows alone.
WITH done AS (
    UPDATE jobs j
    SET state = t.state, state_reason = t.state_reason, runner_id = NULL, lease_expires_at = NULL,
        finished_at = CASE WHEN t.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'EXPIRED') THEN now() END,
        available_at = coalesce(nullif(t.available_at, '0001-01-01 00:00:00Z'), j.available_at)
    FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@attempts::int[]), unnest(@states::text[]), unnest(@state_reasons::text[]),
                    unnest(@available_at::timestamptz[]), unnest(@cancel_requested::boolean[]), unnest(@events::text[]),
                    unnest(@exit_codes::bigint[]), unnest(@return_reasons::text[]), unnest(@host_faults::boolean[]),
                    unnest(@ooms::boolean[]), unnest(@peak_memory_mib::bigint[]), unnest(@image_digests::text[]),
                    unnest(@runner_versions::text[]), unnest(@data::text[]))
         AS t (id, attempt, state, state_reason, available_at, cancel_requested, event, exit_code, return_reason,
               host_fault, oom, peak_memory_mib, image_digest, runner_version, data)
    -- runner_id is set exactly while the job is held (see ClaimJobs).
    WHERE j.id = ANY(@ids::uuid[]) AND j.id = t.id AND j.attempt = t.attempt AND j.runner_id = @runner_id
      -- The decision was taken on a read without locks: a cancel since then
      -- makes it stale, and the caller decides again under FOR UPDATE.
      AND j.cancel_requested = t.cancel_requested
    RETURNING j.id, j.pool_id, j.attempt, j.leased_at, j.state, t.state_reason, t.event, t.exit_code, t.return_reason, t.host_fault,
              t.oom, t.peak_memory_mib, t.image_digest, t.runner_version, t.data
),
-- A run an older version wrote at the claim (before migration 0016) is
-- completed, here as where an attempt ends otherwise, instead of failing
-- the statement.
run_rows AS (
    INSERT INTO job_runs (job_id, attempt, runner_id, runner_name, leased_at, finished_at, exit_code, return_reason,
                          host_fault, oom, peak_memory_mib, image_digest, runner_version, data)
    SELECT d.id, d.attempt, @runner_id, (SELECT name FROM runners WHERE id = @runner_id),
           coalesce(d.leased_at, now()), now(),
           nullif(d.exit_code, -9223372036854775808)::int, nullif(d.return_reason, ''), d.host_fault, d.oom,
           nullif(d.peak_memory_mib, -9223372036854775808), nullif(d.image_digest, ''), nullif(d.runner_version, ''),
           nullif(d.data, '')::jsonb
    FROM done d
    ON CONFLICT (job_id, attempt) DO UPDATE
    SET finished_at = excluded.finished_at, exit_code = excluded.exit_code, return_reason = excluded.return_reason,
        host_fault = excluded.host_fault, oom = excluded.oom, peak_memory_mib = excluded.peak_memory_mib,
        image_digest = excluded.image_digest, runner_version = excluded.runner_version, data = excluded.data
),
event_rows AS (
    INSERT INTO job_events (job_id, type, attempt, runner_id, detail)
    SELECT d.id, d.event, d.attempt, @runner_id, d.state_reason FROM done d
)
SELECT id, pool_id, state FROM done;

-- name: HeldAttempt :one
-- Whether the runner holds the job at this attempt (log uploads, session
-- streams: a job that ended is held by no runner), and
-- whether the job is interactive (TTY, PIPE), whose output is never kept.
SELECT coalesce(bool_or(true), false)::boolean AS held,
       coalesce(bool_or(options->'stdio' IS NOT NULL), false)::boolean AS interactive
FROM jobs
WHERE id = @id AND attempt = @attempt AND runner_id = @runner_id;

-- name: InsertLogChunk :execrows
INSERT INTO job_logs (job_id, attempt, seq, data) VALUES (@job_id, @attempt, @seq, @data)
ON CONFLICT DO NOTHING;

-- name: JobLogs :many
SELECT attempt, seq, data FROM job_logs
WHERE job_id = @job_id AND (attempt, seq) > (@after_attempt::int, @after_seq::int)
ORDER BY attempt, seq
LIMIT @max_rows;

-- name: JobEvents :many
SELECT * FROM job_events WHERE job_id = @job_id AND id > @after_id ORDER BY id;

-- name: ExpiredLeases :many
-- Leases past their expiry, locked for the sweeper; SKIP LOCKED lets
-- several replicas' sweepers share the work instead of colliding.
-- unheard: no heartbeat named the lease, though its runner heartbeated in
-- the second half of it, long after the answer would have reached it had it
-- gone out: the runner never had it. (lease_expires_at - leased_at is the
-- lease as granted, with any outage credit: no heartbeat extended it.)
SELECT sqlc.embed(j),
       (j.state = 'LEASED' AND j.lease_heard_at IS NULL
        AND coalesce(r.last_heartbeat_at > j.leased_at + (j.lease_expires_at - j.leased_at) / 2, false))::boolean AS unheard
FROM jobs j LEFT JOIN runners r ON r.id = j.runner_id
WHERE j.state IN ('LEASED', 'RUNNING') AND j.lease_expires_at < coalesce(sqlc.narg('now')::timestamptz, now())
ORDER BY j.lease_expires_at
LIMIT @max_rows
FOR UPDATE OF j SKIP LOCKED;

-- name: TimedOutJobs :many
-- Queued jobs past their pool's queue timeout, locked for the sweeper.
-- The states are ORed, not listed with IN: so written, the planner joins
-- jobs_queued and jobs_blocked instead of reading the whole table. It does
-- read the whole queue. An index of waiting jobs by age would spare that,
-- but it also serves the claim's scan of queued jobs, and with statistics
-- taken while the queue was empty the planner chose it for the claim and
-- sorted the whole queue on every claim: the claim's plan matters more.
SELECT j.* FROM jobs j JOIN pools p ON p.id = j.pool_id
WHERE (j.state = 'QUEUED' OR j.state = 'BLOCKED')
  AND j.submitted_at + make_interval(hours => coalesce(p.queue_timeout_hours, @default_queue_timeout_hours::int))
      < coalesce(sqlc.narg('now')::timestamptz, now())
LIMIT @max_rows
FOR UPDATE OF j SKIP LOCKED;

-- name: Unplaceable :many
-- Queued jobs that no approved runner of their pool could ever hold, even
-- empty (runmesh_placement, migrations 0015 and 0027): none that runs
-- their kind (a runner that has not asked for work yet may run any), has
-- the labels their selector asks for, and has room for their claim.
-- BLOCKED, with the reason, which kind_ok and selector_ok tell: whether
-- some runner has the kind, and whether one of those matches. A pool
-- with no approved runner at all blocks nothing: one may come.
SELECT sqlc.embed(j),
       EXISTS (SELECT 1 FROM runmesh_placement a WHERE a.pool_id = j.pool_id AND (a.kinds IS NULL OR j.kind = ANY(a.kinds)))
           AS kind_ok,
       EXISTS (SELECT 1 FROM runmesh_placement a WHERE a.pool_id = j.pool_id AND (a.kinds IS NULL OR j.kind = ANY(a.kinds))
                 AND runmesh_selects(j.options->'selector', a.labels)) AS selector_ok
FROM jobs j
WHERE j.state = 'QUEUED'
  AND NOT EXISTS (
      SELECT 1 FROM runmesh_placement a
      WHERE a.pool_id = j.pool_id AND j.cores <= a.cores AND j.memory_mib <= a.memory_mib AND j.gpus <= a.gpu_count
        AND (j.memory_mib = 0 OR a.memory_ok) AND (a.kinds IS NULL OR j.kind = ANY(a.kinds))
        AND (j.options->'selector' IS NULL OR runmesh_selects(j.options->'selector', a.labels)))
  AND EXISTS (SELECT 1 FROM runmesh_placement a WHERE a.pool_id = j.pool_id)
LIMIT @max_rows
FOR UPDATE OF j SKIP LOCKED;

-- name: UnplaceableSince :many
-- Unplaceable, for the jobs submitted after the id given only: walked from
-- there along the primary key, not through the whole queue.
SELECT sqlc.embed(j),
       EXISTS (SELECT 1 FROM runmesh_placement a WHERE a.pool_id = j.pool_id AND (a.kinds IS NULL OR j.kind = ANY(a.kinds)))
           AS kind_ok,
       EXISTS (SELECT 1 FROM runmesh_placement a WHERE a.pool_id = j.pool_id AND (a.kinds IS NULL OR j.kind = ANY(a.kinds))
                 AND runmesh_selects(j.options->'selector', a.labels)) AS selector_ok
FROM jobs j
WHERE j.id > @after::uuid AND j.state = 'QUEUED'
  AND NOT EXISTS (
      SELECT 1 FROM runmesh_placement a
      WHERE a.pool_id = j.pool_id AND j.cores <= a.cores AND j.memory_mib <= a.memory_mib AND j.gpus <= a.gpu_count
        AND (j.memory_mib = 0 OR a.memory_ok) AND (a.kinds IS NULL OR j.kind = ANY(a.kinds))
        AND (j.options->'selector' IS NULL OR runmesh_selects(j.options->'selector', a.labels)))
  AND EXISTS (SELECT 1 FROM runmesh_placement a WHERE a.pool_id = j.pool_id)
ORDER BY j.id
LIMIT @max_rows
FOR UPDATE OF j SKIP LOCKED;

-- name: Unblockable :many
-- BLOCKED jobs that some approved runner could now hold: back to QUEUED.
SELECT j.* FROM jobs j
WHERE j.state = 'BLOCKED'
  AND EXISTS (
      SELECT 1 FROM runmesh_placement a
      WHERE a.pool_id = j.pool_id AND j.cores <= a.cores AND j.memory_mib <= a.memory_mib AND j.gpus <= a.gpu_count
        AND (j.memory_mib = 0 OR a.memory_ok) AND (a.kinds IS NULL OR j.kind = ANY(a.kinds))
        AND (j.options->'selector' IS NULL OR runmesh_selects(j.options->'selector', a.labels)))
LIMIT @max_rows
FOR UPDATE OF j SKIP LOCKED;

-- name: ReturnUndelivered :many
-- Leases granted to a request that ended before its answer went out: the
-- runner never saw them, so each job goes back to the queue at once (or
-- ends CANCELLED when a cancel came meanwhile), its run ends "not
-- delivered", and the attempt does not count as a try. Fenced like a
-- result: only the runner's own lease at exactly that attempt, still
-- LEASED (a job it reported RUNNING was delivered), is returned.
WITH back AS (
    UPDATE jobs j
    SET state = CASE WHEN j.cancel_requested THEN 'CANCELLED' ELSE 'QUEUED' END,
        state_reason = CASE WHEN j.cancel_requested THEN 'cancelled before it reached a runner' ELSE '' END,
        finished_at = CASE WHEN j.cancel_requested THEN now() END,
        runner_id = NULL, lease_expires_at = NULL, undelivered = j.undelivered + 1
    FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@attempts::int[])) AS t (id, attempt)
    WHERE j.id = ANY(@ids::uuid[]) AND j.id = t.id AND j.attempt = t.attempt AND j.runner_id = @runner_id
      AND j.state = 'LEASED'
    RETURNING j.id, j.pool_id, j.attempt, j.state, j.leased_at
),
run_rows AS (
    INSERT INTO job_runs (job_id, attempt, runner_id, runner_name, leased_at, finished_at, return_reason)
    SELECT id, attempt, @runner_id, (SELECT name FROM runners WHERE id = @runner_id), coalesce(leased_at, now()), now(),
           'not delivered'
    FROM back
    ON CONFLICT (job_id, attempt) DO UPDATE SET finished_at = excluded.finished_at, return_reason = excluded.return_reason
),
event_rows AS (
    INSERT INTO job_events (job_id, type, attempt, runner_id, detail)
    SELECT id, CASE WHEN state = 'CANCELLED' THEN 'CANCELLED' ELSE 'REQUEUED' END, attempt, @runner_id,
           @detail::text
    FROM back
)
SELECT id, pool_id, state FROM back;

-- name: EndExpiredRun :exec
-- An attempt whose lease ran out ends without a report from its runner:
-- its run is written from the job row, before the job lets go of it.
INSERT INTO job_runs (job_id, attempt, runner_id, runner_name, leased_at, finished_at, return_reason)
SELECT j.id, j.attempt, j.runner_id, ru.name, coalesce(j.leased_at, now()), now(), 'lease expired'
FROM jobs j JOIN runners ru ON ru.id = j.runner_id
WHERE j.id = @job_id AND j.attempt = @attempt
ON CONFLICT (job_id, attempt) DO UPDATE SET finished_at = excluded.finished_at, return_reason = excluded.return_reason;

-- name: RequeueJob :exec
UPDATE jobs
SET state = 'QUEUED', state_reason = @state_reason, runner_id = NULL, lease_expires_at = NULL, available_at = @available_at
WHERE id = @id;

-- name: SetFailuresInARow :exec
-- A host fault on a job's first attempt counts; any other result resets
-- the count. Reaching the limit quarantines the runner.
UPDATE runners
SET failures_in_a_row = CASE WHEN @host_fault::boolean THEN failures_in_a_row + 1 ELSE 0 END,
    quarantined_at = CASE WHEN @host_fault::boolean AND failures_in_a_row + 1 >= @limit_failures::int AND quarantined_at IS NULL
                          THEN now() ELSE quarantined_at END,
    quarantine_reason = CASE WHEN @host_fault::boolean AND failures_in_a_row + 1 >= @limit_failures::int AND quarantined_at IS NULL
                          THEN format('%s host faults in a row', failures_in_a_row + 1) ELSE quarantine_reason END
-- Most results change nothing here: do not rewrite the row for them.
WHERE id = @id AND (@host_fault::boolean OR failures_in_a_row <> 0);

-- name: CreateHold :one
INSERT INTO gpu_holds (runner_id, gpus, reason, until, created_by)
VALUES (@runner_id, @gpus, @reason, @until, sqlc.narg('created_by'))
RETURNING *;

-- name: ReleaseHold :one
UPDATE gpu_holds SET released_at = now()
WHERE id = @id AND released_at IS NULL
RETURNING *;

-- name: GetHold :one
SELECT * FROM gpu_holds WHERE id = @id;

-- name: RunnerBookings :many
-- What each runner's leased and running jobs book, and the GPUs held.
SELECT r.id AS runner_id,
       coalesce((SELECT sum(j.cores) FROM jobs j WHERE j.runner_id = r.id), 0)::float8 AS cores,
       coalesce((SELECT sum(j.memory_mib) FROM jobs j WHERE j.runner_id = r.id), 0)::bigint AS memory_mib,
       coalesce((SELECT sum(j.gpus) FROM jobs j WHERE j.runner_id = r.id), 0)::int AS gpus,
       coalesce((SELECT sum(h.gpus) FROM gpu_holds h WHERE h.runner_id = r.id AND h.released_at IS NULL AND h.until > now()), 0)::int AS held_gpus
FROM runners r WHERE r.id = ANY(@runner_ids::uuid[]);

-- name: PoolQueues :many
-- Queued jobs per pool, and GPUs held on the pool's runners.
SELECT p.id AS pool_id,
       (SELECT count(*) FROM jobs j WHERE j.pool_id = p.id AND j.state = 'QUEUED')::bigint AS queued,
       coalesce((SELECT sum(h.gpus) FROM gpu_holds h JOIN runners r ON r.id = h.runner_id
                 WHERE r.pool_id = p.id AND h.released_at IS NULL AND h.until > now()), 0)::bigint AS held_gpus
FROM pools p WHERE p.id = ANY(@pool_ids::uuid[]);

-- name: Notify :exec
-- Sends each payload on its channel. Used after a commit, in a transaction
-- of its own that writes nothing (see notifyAfterCommit). NOTIFY gives
-- that transaction an id, so its commit would wait for a WAL flush, with
-- PostgreSQL's notification lock held; a wake-up need not outlive a crash,
-- so this one transaction commits without waiting (synchronous_commit off
-- for it alone). Listeners see it as soon as it commits, as before.
SELECT pg_notify((@channels::text[])[n.i], n.payload)
FROM set_config('synchronous_commit', 'off', true),
     unnest(@payloads::text[]) WITH ORDINALITY AS n (payload, i);

-- name: InsertJobs :many
-- A batch submission in one statement, with each new job's SUBMITTED event.
-- Ids are chosen by the caller, so it knows which row is which input. Keys
-- already used in the pool insert nothing; the caller reads those jobs back.
-- The jobs come as one array a field (as FinishAttempts's outcomes do, and
-- why): stand-ins for nil are the nil UUID and an empty key, and a job's
-- command and env come as an array literal and a JSON object each, and its
-- options as a JSON object or '' for none. Jobs without a key are inserted without ON CONFLICT: its speculative insert
-- costs each row a lock and a second WAL record, for keys they have not.
-- It returns what the database decided of each new job; the caller has
-- the rest (writing out and reading back whole rows cost both sides).
WITH v AS (
    SELECT * FROM ROWS FROM (
        unnest(@ids::uuid[]), unnest(@submitted_by::uuid[]), unnest(@images::text[]), unnest(@commands::text[]),
        unnest(@envs::text[]), unnest(@cores::float8[]), unnest(@memory_mib::bigint[]), unnest(@gpus::int[]),
        unnest(@wall_clock_seconds::int[]), unnest(@priorities::int[]), unnest(@max_attempts::int[]),
        unnest(@idempotency_keys::text[]), unnest(@kinds::text[]), unnest(@options::text[])
    ) AS v (id, submitted_by, image, command, env, cores, memory_mib, gpus, wall_clock_seconds, priority, max_attempts,
            idempotency_key, kind, options)
),
unkeyed AS (
    INSERT INTO jobs (id, pool_id, organisation_id, submitted_by, image, command, env, cores, memory_mib, gpus, wall_clock_seconds,
                      priority, max_attempts, kind, options)
    SELECT v.id, @pool_id, sqlc.narg('organisation_id')::uuid, nullif(v.submitted_by, '00000000-0000-0000-0000-000000000000'), v.image, v.command::text[],
           v.env::jsonb, v.cores, v.memory_mib, v.gpus, v.wall_clock_seconds, v.priority, v.max_attempts, v.kind,
           nullif(v.options, '')::jsonb
    FROM v WHERE v.idempotency_key = ''
    RETURNING id, state, state_reason, attempt, undelivered, available_at, cancel_requested, submitted_at
),
keyed AS (
    INSERT INTO jobs (id, pool_id, organisation_id, submitted_by, image, command, env, cores, memory_mib, gpus, wall_clock_seconds,
                      priority, max_attempts, idempotency_key, kind, options)
    SELECT v.id, @pool_id, sqlc.narg('organisation_id')::uuid, nullif(v.submitted_by, '00000000-0000-0000-0000-000000000000'), v.image, v.command::text[],
           v.env::jsonb, v.cores, v.memory_mib, v.gpus, v.wall_clock_seconds, v.priority, v.max_attempts,
           v.idempotency_key, v.kind, nullif(v.options, '')::jsonb
    FROM v WHERE v.idempotency_key <> ''
    ON CONFLICT (pool_id, organisation_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, state, state_reason, attempt, undelivered, available_at, cancel_requested, submitted_at
),
inserted AS (
    SELECT * FROM unkeyed UNION ALL SELECT * FROM keyed
),
event_rows AS (
    INSERT INTO job_events (job_id, type, attempt) SELECT id, 'SUBMITTED', 0 FROM inserted
)
SELECT * FROM inserted;

-- name: JobEventsForJobs :many
-- Several jobs' events in one statement (a job list showing them).
SELECT * FROM job_events WHERE job_id = ANY(@job_ids::uuid[]) ORDER BY job_id, id;

-- name: JobRunsForJobs :many
-- Ended attempts are rows of job_runs; the attempt a runner holds now is
-- read from the job row (see ClaimJobs), still open.
SELECT r.job_id, r.attempt, r.runner_id, r.runner_name, r.leased_at, r.finished_at, r.exit_code, r.return_reason,
       r.host_fault, r.oom, r.peak_memory_mib, r.image_digest, r.runner_version, r.data
FROM job_runs r WHERE r.job_id = ANY(@job_ids::uuid[])
UNION ALL
SELECT j.id, j.attempt, ru.id, ru.name, coalesce(j.leased_at, now()), NULL, NULL, NULL, false, false, NULL, NULL, NULL, NULL
FROM jobs j JOIN runners ru ON ru.id = j.runner_id
WHERE j.id = ANY(@job_ids::uuid[])
  -- An older version (before migration 0016) wrote the run at its claim,
  -- and left leased_at empty.
  AND NOT EXISTS (SELECT 1 FROM job_runs r WHERE r.job_id = j.id AND r.attempt = j.attempt)
ORDER BY 1, 2;

-- name: JobLogsForJobs :many
-- Several jobs' output, in order: of each job the whole chunks that fit in
-- its last tail_bytes, and how many bytes its output has in all. A list of
-- many jobs with long output stays a bounded answer. The sizes are summed
-- first (length() reads a stored chunk's size without fetching it), and
-- only the chunks kept are read.
WITH sizes AS (
    SELECT job_id, attempt, seq,
           sum(length(data)) OVER (PARTITION BY job_id ORDER BY attempt DESC, seq DESC) AS to_end,
           sum(length(data)) OVER (PARTITION BY job_id) AS total
    FROM job_logs WHERE job_id = ANY(@job_ids::uuid[])
)
SELECT l.job_id, l.attempt, l.seq, l.data, s.total::bigint AS total
FROM sizes s JOIN job_logs l ON l.job_id = s.job_id AND l.attempt = s.attempt AND l.seq = s.seq
WHERE s.to_end <= @tail_bytes::bigint
ORDER BY l.job_id, l.attempt, l.seq;

-- name: PrunableJobs :many
-- Jobs that ended longer than keep_seconds ago (by the database's clock),
-- oldest first, after the id the last batch ended at, locked for the
-- pruning (SKIP LOCKED: the sweepers of several replicas share the work).
-- Job ids are UUIDv7, ordered by submission, and a job ends after it was
-- submitted: the walk is along the primary key, between the last batch and
-- the ids of the cutoff, not through the whole table.
SELECT id FROM jobs
WHERE id > @after::uuid AND id < @below::uuid
  AND finished_at < now() - make_interval(secs => @keep_seconds::float8)
ORDER BY id
LIMIT @max_rows
FOR UPDATE SKIP LOCKED;

-- name: DeleteJobs :execrows
-- Jobs and everything they left: events, runs, output, sessions. (= ANY(...) lets
-- the planner probe each primary key by job.)
WITH events AS (
    DELETE FROM job_events WHERE job_id = ANY(@ids::uuid[])
),
runs AS (
    DELETE FROM job_runs WHERE job_id = ANY(@ids::uuid[])
),
logs AS (
    DELETE FROM job_logs WHERE job_id = ANY(@ids::uuid[])
),
sessions AS (
    DELETE FROM job_sessions WHERE job_id = ANY(@ids::uuid[])
)
DELETE FROM jobs WHERE id = ANY(@ids::uuid[]);

-- name: InsertJobSession :exec
INSERT INTO job_sessions (id, job_id, attempt, admin_id, admin_name, kind, command)
VALUES (@id, @job_id, @attempt, @admin_id, @admin_name, @kind, @command);

-- name: EndJobSession :exec
UPDATE job_sessions SET ended_at = now(), bytes_in = @bytes_in, bytes_out = @bytes_out, end_code = @end_code
WHERE id = @id AND ended_at IS NULL;

-- name: JobSessionsForJobs :many
-- The sessions of several jobs, each job's in the order they opened.
SELECT * FROM job_sessions WHERE job_id = ANY(@ids::uuid[]) ORDER BY job_id, started_at, id;

-- name: UnfinishedJobCounts :many
-- Unfinished jobs by pool, submitting organisation (in platform pools; ''
-- otherwise) and state, for /metrics. The states are ORed so that the
-- planner reads the partial indexes of unfinished jobs (jobs_queued,
-- jobs_blocked, jobs_leases), never the finished ones.
SELECT c.pool_id, coalesce(o.name, '')::text AS submitter, c.state, c.jobs
FROM (SELECT pool_id, organisation_id, state, count(*)::bigint AS jobs
      FROM jobs
      WHERE state = 'QUEUED' OR state = 'BLOCKED' OR state = 'LEASED' OR state = 'RUNNING'
      GROUP BY pool_id, organisation_id, state) c
LEFT JOIN organisations o ON o.id = c.organisation_id;

-- name: PoolsForMetrics :many
-- Every pool with its organisation's name and the GPUs under holds on its
-- runners.
SELECT p.id, coalesce(o.name, '')::text AS organisation, p.name,
       coalesce((SELECT sum(h.gpus) FROM gpu_holds h JOIN runners r ON r.id = h.runner_id
                 WHERE r.pool_id = p.id AND h.released_at IS NULL AND h.until > now()), 0)::bigint AS held_gpus
FROM pools p LEFT JOIN organisations o ON o.id = p.organisation_id;

-- name: LockMaintenanceClock :one
-- The duty's last pass, locked until the transaction ends: the passes of
-- every replica take turns, so each measures the gap since the one before.
SELECT last_pass_at FROM maintenance_clock WHERE duty = @duty FOR UPDATE;

-- name: TickMaintenanceClock :one
INSERT INTO maintenance_clock (duty, last_pass_at) VALUES (@duty, now())
ON CONFLICT (duty) DO UPDATE SET last_pass_at = now()
RETURNING last_pass_at;

-- name: CreditLeases :execrows
-- Gives the leases still held when a gap began (expiring after since) the
-- time the gap took from them.
UPDATE jobs SET lease_expires_at = lease_expires_at + make_interval(secs => @credit_seconds::float8)
WHERE state IN ('LEASED', 'RUNNING') AND lease_expires_at > @since::timestamptz;

-- name: RecordedAttempts :many
-- Of the attempts named (job and attempt, by index), those this runner
-- ended with a result that was accepted (a lease taken back is none), and
-- what they recorded and their jobs' state now: a result sent again after
-- it was recorded.
SELECT r.job_id, r.exit_code, r.return_reason, j.state FROM job_runs r JOIN jobs j ON j.id = r.job_id
WHERE (r.job_id, r.attempt) IN (SELECT unnest(@job_ids::uuid[]), unnest(@attempts::int[]))
  AND r.runner_id = @runner_id AND r.finished_at IS NOT NULL AND r.return_reason IS DISTINCT FROM 'lease expired';

-- name: JobOptionsOf :one
-- A job's options alone (its data, which a result is checked against).
SELECT options FROM jobs WHERE id = @id;
