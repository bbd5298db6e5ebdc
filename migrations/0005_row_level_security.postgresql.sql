-- Hosted mode (issue 8): row-level security on every tenant table, keyed on the per-transaction
-- (or per-checkout) setting semula.workspace_id that the storage layer sets from the caller.
-- It binds the application role (see deploy/postgresql-roles.md); the owner that runs these
-- migrations and the operator's commands is not bound. A table added later with workspace_id
-- needs the same two statements in its own migration (a test checks every such table).

ALTER TABLE workspaces ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON workspaces
    USING (id = current_setting('semula.workspace_id', true))
    WITH CHECK (id = current_setting('semula.workspace_id', true));

ALTER TABLE projects ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON projects
    USING (workspace_id = current_setting('semula.workspace_id', true))
    WITH CHECK (workspace_id = current_setting('semula.workspace_id', true));

ALTER TABLE entries ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON entries
    USING (workspace_id = current_setting('semula.workspace_id', true))
    WITH CHECK (workspace_id = current_setting('semula.workspace_id', true));

ALTER TABLE entry_revisions ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON entry_revisions
    USING (workspace_id = current_setting('semula.workspace_id', true))
    WITH CHECK (workspace_id = current_setting('semula.workspace_id', true));

ALTER TABLE pending ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pending
    USING (workspace_id = current_setting('semula.workspace_id', true))
    WITH CHECK (workspace_id = current_setting('semula.workspace_id', true));

ALTER TABLE call_log ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON call_log
    USING (workspace_id = current_setting('semula.workspace_id', true))
    WITH CHECK (workspace_id = current_setting('semula.workspace_id', true));

ALTER TABLE audit_log ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON audit_log
    USING (workspace_id = current_setting('semula.workspace_id', true))
    WITH CHECK (workspace_id = current_setting('semula.workspace_id', true));

ALTER TABLE tokens ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON tokens
    USING (workspace_id = current_setting('semula.workspace_id', true))
    WITH CHECK (workspace_id = current_setting('semula.workspace_id', true));

ALTER TABLE upstream_usage ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON upstream_usage
    USING (workspace_id = current_setting('semula.workspace_id', true))
    WITH CHECK (workspace_id = current_setting('semula.workspace_id', true));

ALTER TABLE upstream_dry_runs ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON upstream_dry_runs
    USING (workspace_id = current_setting('semula.workspace_id', true))
    WITH CHECK (workspace_id = current_setting('semula.workspace_id', true));

-- The two reads that must cross workspaces, as owner-run functions that return no more than
-- they must: a token by its hash (authentication comes before the workspace is known), and
-- the status of held calls by their unguessable ids (one poll per process, whatever the tenant).
CREATE FUNCTION semula_token_by_hash(p_hash TEXT)
RETURNS TABLE (id TEXT, workspace_id TEXT, name TEXT, hash TEXT, role TEXT, scope TEXT, project_id TEXT,
               created_at DOUBLE PRECISION, revoked_at DOUBLE PRECISION, project_name TEXT,
               workspace_disabled INTEGER)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS $$
    SELECT t.id, t.workspace_id, t.name, t.hash, t.role, t.scope, t.project_id, t.created_at, t.revoked_at,
           p.name, w.disabled
    FROM tokens t JOIN workspaces w ON w.id = t.workspace_id LEFT JOIN projects p ON p.id = t.project_id
    WHERE t.hash = p_hash AND t.revoked_at IS NULL
$$;

CREATE FUNCTION semula_resolved_among(p_ids JSONB)
RETURNS TABLE (id TEXT, status TEXT, entry_id TEXT, resolved_at DOUBLE PRECISION)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS $$
    SELECT pd.id, pd.status, pd.entry_id, pd.resolved_at FROM pending pd
    WHERE pd.id IN (SELECT jsonb_array_elements_text(p_ids)) AND pd.status <> 'pending'
$$;
