-- Hosted mode: dashboard sessions are a tenant table like the others
-- (0005_row_level_security.postgresql.sql).
ALTER TABLE ui_sessions ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON ui_sessions
    USING (workspace_id = current_setting('semula.workspace_id', true))
    WITH CHECK (workspace_id = current_setting('semula.workspace_id', true));

-- A dashboard request is read before its workspace is known, like a bearer token: one owner-run
-- read of the session, its token and the workspace, by the session secret's hash. It returns
-- neither hash.
CREATE FUNCTION semula_ui_session_by_hash(p_hash TEXT)
RETURNS TABLE (session_id TEXT, created_at DOUBLE PRECISION, last_seen_at DOUBLE PRECISION,
               ended_at DOUBLE PRECISION, id TEXT, workspace_id TEXT, role TEXT, scope TEXT,
               project_id TEXT, revoked_at DOUBLE PRECISION, workspace_disabled INTEGER)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS $$
    SELECT s.id, s.created_at, s.last_seen_at, s.ended_at, t.id, t.workspace_id, t.role, t.scope,
           t.project_id, t.revoked_at, w.disabled
    FROM ui_sessions s JOIN tokens t ON t.id = s.token_id JOIN workspaces w ON w.id = t.workspace_id
    WHERE s.hash = p_hash
$$;
