-- A call-log row no longer names its workspace through a foreign key (docs/decisions/0048-call-log-rows.md),
-- as on PostgreSQL. SQLite drops a constraint only by building the table again: the rows are copied
-- in id order, then its two indexes are made anew. No other table references the call log.
CREATE TABLE call_log_unkeyed (
    id TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL,
    project_id TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    fingerprint TEXT,
    model TEXT,
    stream INTEGER NOT NULL DEFAULT 0,
    outcome TEXT NOT NULL,
    status INTEGER NOT NULL,
    duration_ms DOUBLE PRECISION NOT NULL,
    entry_id TEXT,
    pending_id TEXT,
    token_id TEXT,
    api TEXT
);

INSERT INTO call_log_unkeyed (id, workspace_id, project_id, created_at, fingerprint, model, stream, outcome,
    status, duration_ms, entry_id, pending_id, token_id, api)
SELECT id, workspace_id, project_id, created_at, fingerprint, model, stream, outcome, status, duration_ms,
    entry_id, pending_id, token_id, api
FROM call_log ORDER BY id;

DROP TABLE call_log;

ALTER TABLE call_log_unkeyed RENAME TO call_log;

CREATE INDEX call_log_created_idx ON call_log (created_at);
CREATE INDEX call_log_project_idx ON call_log (project_id, id);
