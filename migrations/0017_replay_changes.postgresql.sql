-- What a kept replay hit depends on (docs/decisions/0040-replay-change-counter.md), as on SQLite but
-- one counter per workspace: every change of a row a replay answer is made of adds one to its
-- workspace's counter, by trigger, in the writer's transaction (the row lock orders the writers of
-- one workspace, so the counter moves in commit order). store.version() reads one row by primary key
-- for every hit of a workspace waiting together, where the row versions of the project and the entry
-- were a join over two arrays that PostgreSQL planned afresh at every execution (0.6 ms of server
-- time). The trigger function runs as its owner: row-level security does not hide the counter from
-- it, and a tenant reads only its own.

CREATE TABLE replay_changes (
    workspace_id TEXT PRIMARY KEY,
    counter BIGINT NOT NULL
);

INSERT INTO replay_changes (workspace_id, counter) SELECT id, 0 FROM workspaces;

ALTER TABLE replay_changes ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON replay_changes
    USING (workspace_id = current_setting('semula.workspace_id', true))
    WITH CHECK (workspace_id = current_setting('semula.workspace_id', true));

CREATE FUNCTION semula_count_replay_change() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $$
DECLARE
    workspace TEXT;
BEGIN
    IF TG_TABLE_NAME = 'workspaces' THEN
        IF TG_OP = 'DELETE' THEN workspace := OLD.id; ELSE workspace := NEW.id; END IF;
    ELSIF TG_OP = 'DELETE' THEN
        workspace := OLD.workspace_id;
    ELSE
        workspace := NEW.workspace_id;
    END IF;
    INSERT INTO replay_changes AS c (workspace_id, counter) VALUES (workspace, 1)
    ON CONFLICT (workspace_id) DO UPDATE SET counter = c.counter + 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER workspaces_insert_changes AFTER INSERT ON workspaces
    FOR EACH ROW EXECUTE FUNCTION semula_count_replay_change();

CREATE TRIGGER workspaces_update_changes AFTER UPDATE ON workspaces
    FOR EACH ROW EXECUTE FUNCTION semula_count_replay_change();

CREATE TRIGGER workspaces_delete_changes AFTER DELETE ON workspaces
    FOR EACH ROW EXECUTE FUNCTION semula_count_replay_change();

CREATE TRIGGER projects_insert_changes AFTER INSERT ON projects
    FOR EACH ROW EXECUTE FUNCTION semula_count_replay_change();

CREATE TRIGGER projects_update_changes AFTER UPDATE ON projects
    FOR EACH ROW EXECUTE FUNCTION semula_count_replay_change();

CREATE TRIGGER projects_delete_changes AFTER DELETE ON projects
    FOR EACH ROW EXECUTE FUNCTION semula_count_replay_change();

CREATE TRIGGER entries_insert_changes AFTER INSERT ON entries
    FOR EACH ROW EXECUTE FUNCTION semula_count_replay_change();

CREATE TRIGGER entries_update_changes AFTER UPDATE ON entries
    FOR EACH ROW EXECUTE FUNCTION semula_count_replay_change();

CREATE TRIGGER entries_delete_changes AFTER DELETE ON entries
    FOR EACH ROW EXECUTE FUNCTION semula_count_replay_change();

CREATE TRIGGER entry_answers_insert_changes AFTER INSERT ON entry_answers
    FOR EACH ROW EXECUTE FUNCTION semula_count_replay_change();

CREATE TRIGGER entry_answers_update_changes AFTER UPDATE ON entry_answers
    FOR EACH ROW EXECUTE FUNCTION semula_count_replay_change();

CREATE TRIGGER entry_answers_delete_changes AFTER DELETE ON entry_answers
    FOR EACH ROW EXECUTE FUNCTION semula_count_replay_change();

CREATE TRIGGER tokens_insert_changes AFTER INSERT ON tokens
    FOR EACH ROW EXECUTE FUNCTION semula_count_replay_change();

-- Not last_used_at: a token's touch (once a minute) changes no answer.

CREATE TRIGGER tokens_update_changes AFTER UPDATE OF workspace_id, hash, role, scope, project_id, revoked_at, expires_at ON tokens
    FOR EACH ROW EXECUTE FUNCTION semula_count_replay_change();

CREATE TRIGGER tokens_delete_changes AFTER DELETE ON tokens
    FOR EACH ROW EXECUTE FUNCTION semula_count_replay_change();
