-- A notice of every replay change, for workers that check kept hits by notice rather than by reading
-- the counter (SEMULA_CHANGE_CHECK=notify, docs/decisions/0047-change-notices.md). The function that
-- counts a change (0017_replay_changes.postgresql.sql) also sends `NOTIFY semula_replay_changes` with
-- the workspace's id: PostgreSQL delivers it when the writer's transaction commits, to every session
-- listening then, and sends one notice for a transaction that changed many rows of one workspace
-- (identical notices of a transaction are folded into one). With nobody listening it costs the
-- commit a short lock on the notice queue.

CREATE OR REPLACE FUNCTION semula_count_replay_change() RETURNS trigger
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
    PERFORM pg_notify('semula_replay_changes', workspace);
    RETURN NULL;
END
$$;
