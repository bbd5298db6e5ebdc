-- Revisions are numbered per answer of a sequence: the unique key becomes (entry_id, seq, number).
-- SQLite cannot drop a table constraint, so the table is rebuilt (nothing references it).
CREATE TABLE entry_revisions_new (
    id TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces (id),
    entry_id TEXT NOT NULL REFERENCES entries (id) ON DELETE CASCADE,
    number INTEGER NOT NULL,
    response TEXT NOT NULL,
    chunks TEXT,
    actor TEXT NOT NULL,
    summary TEXT NOT NULL DEFAULT '',
    created_at DOUBLE PRECISION NOT NULL,
    seq INTEGER NOT NULL DEFAULT 1,
    UNIQUE (entry_id, seq, number)
);
INSERT INTO entry_revisions_new (id, workspace_id, entry_id, number, response, chunks, actor, summary,
    created_at, seq)
SELECT id, workspace_id, entry_id, number, response, chunks, actor, summary, created_at, seq
FROM entry_revisions;
DROP TABLE entry_revisions;
ALTER TABLE entry_revisions_new RENAME TO entry_revisions;
