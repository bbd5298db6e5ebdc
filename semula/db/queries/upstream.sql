-- Record-through (docs/design/record-through.md): the per-project budget and dry-run prompts.

-- name: ensure_upstream_usage
INSERT INTO upstream_usage (project_id, workspace_id, calls, prompt_tokens, completion_tokens)
VALUES (:project_id, :workspace_id, 0, 0, 0)
ON CONFLICT (project_id) DO NOTHING

-- name: take_upstream_call
-- The budget check and the count are one guarded statement, so concurrent misses cannot pass the cap.
-- It also re-checks, in the same round trip, that answer :seq does not replay for the fingerprint by now
-- (1 outside replay sessions; the call's number in a session that records sequences).
UPDATE upstream_usage SET calls = calls + 1
WHERE project_id = :project_id AND calls < :max_calls
  AND (CAST(:max_tokens AS BIGINT) IS NULL OR prompt_tokens + completion_tokens < :max_tokens)
  AND NOT EXISTS (
    SELECT 1 FROM entries
    WHERE project_id = :project_id AND fingerprint = :fingerprint AND review_status <> 'rejected'
      AND answers >= :seq
  )

-- name: give_back_upstream_call
UPDATE upstream_usage SET calls = calls - 1 WHERE project_id = :project_id AND calls > 0

-- name: get_upstream_usage
SELECT calls, prompt_tokens, completion_tokens FROM upstream_usage WHERE project_id = :project_id

-- name: reset_upstream_usage
UPDATE upstream_usage SET calls = 0, prompt_tokens = 0, completion_tokens = 0 WHERE project_id = :project_id

-- name: record_dry_run
INSERT INTO upstream_dry_runs (project_id, fingerprint, workspace_id, model, request, count, first_seen, last_seen)
VALUES (:project_id, :fingerprint, :workspace_id, :model, :request, 1, :now, :now)
ON CONFLICT (project_id, fingerprint) DO UPDATE SET count = upstream_dry_runs.count + 1, last_seen = excluded.last_seen

-- name: list_dry_runs
SELECT fingerprint, model, request, count, first_seen, last_seen FROM upstream_dry_runs
WHERE project_id = :project_id
ORDER BY last_seen DESC
LIMIT :limit

-- name: clear_dry_runs
DELETE FROM upstream_dry_runs WHERE project_id = :project_id

-- name: claim_flight
-- Single flight across the deployment (docs/decisions/0057-several-hosts.md): a row back means this
-- caller leads the flight: no row was there, or its lease had ended (a holder that died, or a failed
-- call whose waiters have had their error). Concurrent claimers meet on the primary key: one wins.
INSERT INTO upstream_flights (project_id, fingerprint, seq, workspace_id, holder, expires_at, error)
VALUES (:project_id, :fingerprint, :seq, :workspace_id, :holder, :until, NULL)
ON CONFLICT (project_id, fingerprint, seq) DO UPDATE
SET holder = excluded.holder, expires_at = excluded.expires_at, error = NULL
WHERE upstream_flights.expires_at <= :now

-- name: claim_flight.postgresql
-- The same, committed without waiting for the WAL flush (as claim_pending.postgresql, decision 0022):
-- a forward's claim and end were two flushes, 1.4 ms of a forward's time at the median here. A claim
-- lost in a database crash lets a second call through; an end lost there makes the waiters wait out
-- the lease. The entry and the budget stay synchronous.
WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true) AS setting)
INSERT INTO upstream_flights (project_id, fingerprint, seq, workspace_id, holder, expires_at, error)
SELECT :project_id, :fingerprint, :seq, :workspace_id, :holder, :until, NULL FROM relaxed
ON CONFLICT (project_id, fingerprint, seq) DO UPDATE
SET holder = excluded.holder, expires_at = excluded.expires_at, error = NULL
WHERE upstream_flights.expires_at <= :now

-- name: renew_flight
UPDATE upstream_flights SET expires_at = :until
WHERE project_id = :project_id AND fingerprint = :fingerprint AND seq = :seq AND holder = :holder

-- name: end_flight
DELETE FROM upstream_flights
WHERE project_id = :project_id AND fingerprint = :fingerprint AND seq = :seq AND holder = :holder

-- name: end_flight.postgresql
WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true) AS setting)
DELETE FROM upstream_flights
WHERE project_id = :project_id AND fingerprint = :fingerprint AND seq = :seq AND holder = :holder
  AND EXISTS (SELECT 1 FROM relaxed)

-- name: fail_flight
-- The flight's error for its waiters; its lease ends now, so the next call after it tries again.
UPDATE upstream_flights SET error = :error, expires_at = :now
WHERE project_id = :project_id AND fingerprint = :fingerprint AND seq = :seq AND holder = :holder

-- name: get_flight
SELECT holder, expires_at, error FROM upstream_flights
WHERE project_id = :project_id AND fingerprint = :fingerprint AND seq = :seq

-- name: prune_flights
-- across workspaces: retention, the same for every workspace.
-- Failed flights nobody called again, and those of a process that died: kept no longer than this.
DELETE FROM upstream_flights WHERE expires_at < :cutoff
