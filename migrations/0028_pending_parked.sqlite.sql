-- How many calls each project has parked, kept by triggers (issue 52, docs/decisions/0080-held-calls-at-scale.md):
-- a miss parks only while its project has fewer than max_misses, and counting the pending rows at each park
-- made parking N calls cost N²/2 index entries (a count over 50,000 rows took 15-85 ms here). SQLite writes
-- one at a time, so one row per project (shard 0); PostgreSQL's migration spreads a project over shards.
-- A row left by a deleted project goes with it (ON DELETE CASCADE).
CREATE TABLE pending_parked (
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    shard INTEGER NOT NULL,
    workspace_id TEXT NOT NULL REFERENCES workspaces (id),
    parked INTEGER NOT NULL,
    PRIMARY KEY (project_id, shard)
);

INSERT INTO pending_parked (project_id, shard, workspace_id, parked)
SELECT project_id, 0, MIN(workspace_id), COUNT(*) FROM pending WHERE status = 'pending' GROUP BY project_id;

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
