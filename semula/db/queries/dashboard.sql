-- Statements of the dashboard's overview: counts per project.

-- name: parked_counts
SELECT project_id, COUNT(*) AS parked FROM pending
WHERE workspace_id = :workspace_id AND status = 'pending'
GROUP BY project_id

-- name: outcome_counts_since
SELECT project_id, outcome, COUNT(*) AS calls FROM call_log
WHERE workspace_id = :workspace_id AND created_at >= :since
GROUP BY project_id, outcome
