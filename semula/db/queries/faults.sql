-- Statements of fault rules (docs/decisions/0061-fault-rules.md).

-- name: count_fault_call
-- One more call a rule matched in this session ('' when none): the first statement of the rule's
-- transaction takes the row (PostgreSQL's row lock, SQLite's write lock), so calls in flight at once,
-- in any processes, get distinct numbers and see the faults injected before them.
INSERT INTO fault_counts (workspace_id, project_id, session, rule, calls, fired, updated_at)
VALUES (:workspace_id, :project_id, :session, :rule, 1, 0, :now)
ON CONFLICT (project_id, session, rule) DO UPDATE SET
    calls = fault_counts.calls + 1, updated_at = excluded.updated_at
RETURNING calls, fired

-- name: count_fault_fired
UPDATE fault_counts SET fired = fired + 1 WHERE project_id = :project_id AND session = :session AND rule = :rule

-- name: fault_counts
SELECT session, rule, calls, fired, updated_at FROM fault_counts WHERE project_id = :project_id
ORDER BY session, rule

-- name: drop_fault_counts
DELETE FROM fault_counts WHERE project_id = :project_id AND rule = :rule

-- name: reset_session_fault_counts
DELETE FROM fault_counts WHERE project_id = :project_id AND session = :session

-- name: set_project_faults
UPDATE projects SET faults = :faults, updated_at = :now WHERE id = :id AND workspace_id = :workspace_id
