-- Revisions are numbered per answer of a sequence: the unique key becomes (entry_id, seq, number).
ALTER TABLE entry_revisions DROP CONSTRAINT entry_revisions_entry_id_number_key;
ALTER TABLE entry_revisions ADD CONSTRAINT entry_revisions_entry_seq_number_key UNIQUE (entry_id, seq, number);

-- The new tenant tables, as migration 0005 does for the others.
ALTER TABLE entry_answers ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON entry_answers
    USING (workspace_id = current_setting('semula.workspace_id', true))
    WITH CHECK (workspace_id = current_setting('semula.workspace_id', true));

ALTER TABLE session_calls ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON session_calls
    USING (workspace_id = current_setting('semula.workspace_id', true))
    WITH CHECK (workspace_id = current_setting('semula.workspace_id', true));
