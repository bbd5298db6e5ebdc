-- The token lookup by hash (0005) returns the two columns 0009_tokens_rotation added; its row type
-- changes, so it is dropped and made again (sorted after 0009_tokens_rotation.sql, which adds them).
DROP FUNCTION semula_token_by_hash(TEXT);
CREATE FUNCTION semula_token_by_hash(p_hash TEXT)
RETURNS TABLE (id TEXT, workspace_id TEXT, name TEXT, hash TEXT, role TEXT, scope TEXT, project_id TEXT,
               created_at DOUBLE PRECISION, revoked_at DOUBLE PRECISION, project_name TEXT,
               workspace_disabled INTEGER, last_used_at DOUBLE PRECISION, expires_at DOUBLE PRECISION)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS $$
    SELECT t.id, t.workspace_id, t.name, t.hash, t.role, t.scope, t.project_id, t.created_at, t.revoked_at,
           p.name, w.disabled, t.last_used_at, t.expires_at
    FROM tokens t JOIN workspaces w ON w.id = t.workspace_id LEFT JOIN projects p ON p.id = t.project_id
    WHERE t.hash = p_hash AND t.revoked_at IS NULL
$$;
