-- The fault counters are a tenant table, as migration 0005 makes the others.
ALTER TABLE fault_counts ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON fault_counts
    USING (workspace_id = current_setting('semula.workspace_id', true))
    WITH CHECK (workspace_id = current_setting('semula.workspace_id', true));
