-- The triggers that keep pending_parked (0028_pending_parked): SQLite writes one at a time, so one row
-- per project (shard 0).
CREATE TRIGGER pending_parked_insert AFTER INSERT ON pending WHEN NEW.status = 'pending'
BEGIN
    INSERT INTO pending_parked (project_id, shard, workspace_id, parked) VALUES (NEW.project_id, 0, NEW.workspace_id, 1)
    ON CONFLICT (project_id, shard) DO UPDATE SET parked = parked + 1;
END;

CREATE TRIGGER pending_parked_resolve AFTER UPDATE OF status ON pending
WHEN OLD.status = 'pending' AND NEW.status <> 'pending'
BEGIN
    UPDATE pending_parked SET parked = parked - 1 WHERE project_id = OLD.project_id AND shard = 0;
END;

CREATE TRIGGER pending_parked_reopen AFTER UPDATE OF status ON pending
WHEN OLD.status <> 'pending' AND NEW.status = 'pending'
BEGIN
    INSERT INTO pending_parked (project_id, shard, workspace_id, parked) VALUES (NEW.project_id, 0, NEW.workspace_id, 1)
    ON CONFLICT (project_id, shard) DO UPDATE SET parked = parked + 1;
END;

CREATE TRIGGER pending_parked_delete AFTER DELETE ON pending WHEN OLD.status = 'pending'
BEGIN
    UPDATE pending_parked SET parked = parked - 1 WHERE project_id = OLD.project_id AND shard = 0;
END;

-- The calls parked before, counted in the transaction that makes the triggers: none is missed or counted twice.
INSERT INTO pending_parked (project_id, shard, workspace_id, parked)
SELECT project_id, 0, MIN(workspace_id), COUNT(*) FROM pending WHERE status = 'pending' GROUP BY project_id;
