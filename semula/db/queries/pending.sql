-- Statements of the pending queue (docs/design/product.md §5): list, and the claim lease.

-- name: list_pending
-- Oldest first, the order claims take; the request text is left out, a list never needs it.
-- :abandoned 1 keeps only the pending calls nobody waits for (migration 0024), 0 all others.
SELECT pd.id, pd.project_id, pd.model, pd.stream, pd.status, pd.entry_id, pd.claimed_by,
    pd.claim_expires_at, pd.created_at, pd.resolved_at, pd.api, pd.seq, pd.held_until, p.name AS project_name
FROM pending pd JOIN projects p ON p.id = pd.project_id
WHERE pd.workspace_id = :workspace_id
  AND (CAST(:project_id AS TEXT) IS NULL OR pd.project_id = :project_id)
  AND (CAST(:status AS TEXT) IS NULL OR pd.status = :status)
  AND (CAST(:abandoned AS INTEGER) IS NULL
    OR (CAST(:abandoned AS INTEGER) = 1 AND pd.status = 'pending' AND COALESCE(pd.held_until, 0) <= :now)
    OR (CAST(:abandoned AS INTEGER) = 0 AND (pd.status <> 'pending' OR pd.held_until > :now)))
  AND (CAST(:after AS TEXT) IS NULL OR pd.id > :after)
ORDER BY pd.id
LIMIT :limit

-- name: claim_candidates
-- The oldest pending calls nobody holds: never claimed (or given back), or whose lease has ended.
-- Two index ranges (migration 0006), so the calls held right now are never scanned. The guarded
-- UPDATE below decides who gets each one.
SELECT id FROM (
    SELECT id FROM pending
    WHERE workspace_id = :workspace_id AND status = 'pending' AND claim_expires_at IS NULL
      AND (CAST(:project_id AS TEXT) IS NULL OR project_id = :project_id)
    ORDER BY id
    LIMIT :limit
) AS unclaimed
UNION ALL
SELECT id FROM (
    SELECT id FROM pending
    WHERE workspace_id = :workspace_id AND status = 'pending' AND claim_expires_at IS NOT NULL
      AND claim_expires_at <= :now
      AND (CAST(:project_id AS TEXT) IS NULL OR project_id = :project_id)
    ORDER BY id
    LIMIT :limit
) AS expired
ORDER BY id
LIMIT :limit

-- name: claim_pending
-- One claim: it matches only while the call is pending and no unexpired lease holds it, so of
-- two racing claimers exactly one gets a row back (a row count of 1). An expired lease is no
-- lease. RETURNING hands the winner the call in full, saving a round trip.
UPDATE pending SET claimed_by = :worker, claim_expires_at = :until
WHERE id = :id AND workspace_id = :workspace_id AND status = 'pending' AND (claim_expires_at IS NULL OR claim_expires_at <= :now)
RETURNING *, (SELECT name FROM projects WHERE projects.id = pending.project_id AND projects.workspace_id = :workspace_id)
    AS project_name

-- name: claim_pending.postgresql
-- The same UPDATE, committed without waiting for the WAL flush (synchronous_commit off for this
-- statement's transaction only). Racing claimers queue on the winner's row lock until it commits,
-- so the flush would set the pace of the whole queue. A claim is advisory: one lost in a database
-- crash is a lease that ended early. Answers and everything else stay synchronous (decision 0022).
WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true) AS setting)
UPDATE pending SET claimed_by = :worker, claim_expires_at = :until
WHERE id = :id AND workspace_id = :workspace_id AND status = 'pending' AND (claim_expires_at IS NULL OR claim_expires_at <= :now)
  AND EXISTS (SELECT 1 FROM relaxed)
RETURNING *, (SELECT name FROM projects WHERE projects.id = pending.project_id AND projects.workspace_id = :workspace_id)
    AS project_name

-- name: release_claim
-- Give a claimed call back (the answerer, docs/design/answerer.md, through the service only).
UPDATE pending SET claimed_by = NULL, claim_expires_at = NULL
WHERE id = :id AND workspace_id = :workspace_id AND status = 'pending' AND claimed_by = :worker

-- name: take_lease
-- The lease `name` (migration 0023) for :holder: taken when free or lapsed, renewed when held already.
-- A row back (a row count of 1) means :holder has it until :until.
INSERT INTO leases (name, holder, expires_at) VALUES (:name, :holder, :until)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE leases.holder = excluded.holder OR leases.expires_at <= :now

-- name: metrics_projects
-- across workspaces: the operator's scrape, every project's gauges.
-- The scrape's gauges (semula.metrics.StoreCollector): one row per project, read by /metrics only.
SELECT w.name AS workspace, p.name AS project, p.record_timeout, p.upstream_max_calls, p.upstream_max_tokens,
    COALESCE(u.calls, 0) AS upstream_calls,
    COALESCE(u.prompt_tokens + u.completion_tokens, 0) AS upstream_tokens,
    COALESCE(q.parked, 0) AS parked, q.oldest, COALESCE(q.claims_expired, 0) AS claims_expired,
    COALESCE(q.abandoned, 0) AS abandoned
FROM projects p
JOIN workspaces w ON w.id = p.workspace_id
LEFT JOIN upstream_usage u ON u.project_id = p.id
LEFT JOIN (
    SELECT project_id, COUNT(*) AS parked, MIN(created_at) AS oldest,
        CAST(SUM(CASE WHEN claimed_by IS NOT NULL AND claim_expires_at <= :now THEN 1 ELSE 0 END) AS BIGINT)
            AS claims_expired,
        CAST(SUM(CASE WHEN COALESCE(held_until, 0) <= :now THEN 1 ELSE 0 END) AS BIGINT) AS abandoned
    FROM pending WHERE status = 'pending' GROUP BY project_id
) q ON q.project_id = p.id
ORDER BY w.name, p.name
