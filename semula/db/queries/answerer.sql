-- Statements of the answerer daemon (docs/design/answerer.md).

-- name: answerer_candidates
-- Parked calls, oldest first, in projects with the answerer on and that nobody holds; the
-- daemon pages with :after past calls it tried already, then claims each by id.
SELECT pd.id, p.name AS project_name
FROM pending pd JOIN projects p ON p.id = pd.project_id
WHERE pd.workspace_id = :workspace_id AND pd.status = 'pending' AND p.answerer = 1
  AND (pd.claim_expires_at IS NULL OR pd.claim_expires_at <= :now)
  AND (CAST(:after AS TEXT) IS NULL OR pd.id > :after)
ORDER BY pd.id
LIMIT :limit
