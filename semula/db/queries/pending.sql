-- Statements of the pending queue (SPEC §5): list, and the claim lease.

-- name: list_pending
-- Oldest first, the order claims take; the request text is left out, a list never needs it.
SELECT pd.id, pd.project_id, pd.model, pd.stream, pd.status, pd.entry_id, pd.claimed_by,
    pd.claim_expires_at, pd.created_at, pd.resolved_at, p.name AS project_name
FROM pending pd JOIN projects p ON p.id = pd.project_id
WHERE pd.workspace_id = :workspace_id
  AND (CAST(:project_id AS TEXT) IS NULL OR pd.project_id = :project_id)
  AND (CAST(:status AS TEXT) IS NULL OR pd.status = :status)
  AND (CAST(:after AS TEXT) IS NULL OR pd.id > :after)
ORDER BY pd.id
LIMIT :limit

-- name: claim_candidates
-- The oldest pending calls nobody holds; the guarded UPDATE below decides who gets each one.
SELECT id FROM pending
WHERE workspace_id = :workspace_id AND status = 'pending'
  AND (CAST(:project_id AS TEXT) IS NULL OR project_id = :project_id)
  AND (claim_expires_at IS NULL OR claim_expires_at <= :now)
ORDER BY id
LIMIT :limit

-- name: claim_pending
-- One claim: it matches only while the call is pending and no unexpired lease holds it, so of
-- two racing claimers exactly one sees a row count of 1. An expired lease is no lease.
UPDATE pending SET claimed_by = :worker, claim_expires_at = :until
WHERE id = :id AND status = 'pending' AND (claim_expires_at IS NULL OR claim_expires_at <= :now)

-- name: release_claim
-- Give a claimed call back (the answerer of ADR-0014, through the service only).
UPDATE pending SET claimed_by = NULL, claim_expires_at = NULL
WHERE id = :id AND status = 'pending' AND claimed_by = :worker
