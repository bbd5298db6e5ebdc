-- How many calls each project has parked, kept by a trigger (issue 52, docs/decisions/0080-held-calls-at-scale.md):
-- a miss parks only while its project has fewer than max_misses, and counting the pending rows at each park
-- made parking N calls cost N²/2 index entries. A park adds one to one of 8 shards of its project, drawn at
-- random, so concurrent parks seldom wait on one row's lock; a resolution or a delete takes one away from a
-- shard that exists (never inserting one: a project being deleted takes its rows with it). The sum is the
-- count. The trigger runs as the owner: counting is no tenant's statement.
CREATE TABLE pending_parked (
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    shard INTEGER NOT NULL,
    workspace_id TEXT NOT NULL REFERENCES workspaces (id),
    parked INTEGER NOT NULL,
    PRIMARY KEY (project_id, shard)
);

INSERT INTO pending_parked (project_id, shard, workspace_id, parked)
SELECT project_id, 0, MIN(workspace_id), COUNT(*) FROM pending WHERE status = 'pending' GROUP BY project_id;

ALTER TABLE pending_parked ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pending_parked
    USING (workspace_id = current_setting('semula.workspace_id', true))
    WITH CHECK (workspace_id = current_setting('semula.workspace_id', true));

CREATE FUNCTION semula_count_parked() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $$
DECLARE
    was BOOLEAN := TG_OP <> 'INSERT' AND OLD.status = 'pending';
    now_is BOOLEAN := TG_OP <> 'DELETE' AND NEW.status = 'pending';
    drawn INTEGER := floor(random() * 8)::INTEGER;
BEGIN
    IF now_is AND NOT was THEN
        INSERT INTO pending_parked (project_id, shard, workspace_id, parked)
        VALUES (NEW.project_id, drawn, NEW.workspace_id, 1)
        ON CONFLICT (project_id, shard) DO UPDATE SET parked = pending_parked.parked + 1;
    ELSIF was AND NOT now_is THEN
        UPDATE pending_parked SET parked = parked - 1 WHERE project_id = OLD.project_id AND shard = drawn;
        IF NOT FOUND THEN
            UPDATE pending_parked SET parked = parked - 1
            WHERE project_id = OLD.project_id
              AND shard = (SELECT MIN(shard) FROM pending_parked WHERE project_id = OLD.project_id);
        END IF;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER pending_parked AFTER INSERT OR DELETE OR UPDATE OF status ON pending
FOR EACH ROW EXECUTE FUNCTION semula_count_parked();
