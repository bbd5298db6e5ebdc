-- The trigger that keeps pending_parked (0028_pending_parked): a park adds one to one of 8 shards of its
-- project, drawn at random, so concurrent parks seldom wait on one row's lock; a resolution or a delete
-- takes one away from a shard that exists (never inserting one: a project being deleted takes its rows
-- with it). It runs as the owner: counting is no tenant's statement. The table is a tenant table, as
-- migration 0005 makes the others.
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

-- The calls parked before, counted in the transaction that makes the triggers: none is missed or counted twice.
INSERT INTO pending_parked (project_id, shard, workspace_id, parked)
SELECT project_id, 0, MIN(workspace_id), COUNT(*) FROM pending WHERE status = 'pending' GROUP BY project_id;
