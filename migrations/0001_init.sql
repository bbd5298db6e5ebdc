-- The tables of docs/design/product.md §3-§9. Portable SQL: it runs unchanged on SQLite and PostgreSQL.
-- Times are Unix seconds (DOUBLE PRECISION); booleans are 0/1 INTEGERs; JSON is TEXT.
-- Every tenant table carries workspace_id. Public ids are prefixed, time-ordered strings.

CREATE TABLE workspaces (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    disabled INTEGER NOT NULL DEFAULT 0,
    created_at DOUBLE PRECISION NOT NULL
);

INSERT INTO workspaces (id, name, disabled, created_at) VALUES ('wsp_default', 'default', 0, 0);

CREATE TABLE projects (
    id TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces (id),
    name TEXT NOT NULL,
    mode TEXT NOT NULL DEFAULT 'record',
    record_timeout INTEGER NOT NULL DEFAULT 300,
    max_misses INTEGER NOT NULL DEFAULT 100,
    ignore_fields TEXT NOT NULL DEFAULT '[]',
    normalize TEXT NOT NULL DEFAULT '[]',
    record_through INTEGER NOT NULL DEFAULT 0,
    upstream_model TEXT,
    upstream_max_calls INTEGER NOT NULL DEFAULT 100,
    upstream_max_tokens BIGINT,
    upstream_dry_run INTEGER NOT NULL DEFAULT 0,
    answerer INTEGER NOT NULL DEFAULT 0,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    UNIQUE (workspace_id, name)
);

CREATE TABLE entries (
    id TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces (id),
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    fingerprint TEXT NOT NULL,
    model TEXT,
    request TEXT NOT NULL,
    response TEXT NOT NULL,
    chunks TEXT,
    revision INTEGER NOT NULL DEFAULT 1,
    pinned INTEGER NOT NULL DEFAULT 0,
    review_status TEXT NOT NULL DEFAULT 'unreviewed',
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    UNIQUE (project_id, fingerprint)
);

CREATE INDEX entries_project_idx ON entries (project_id, id);

CREATE TABLE entry_revisions (
    id TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces (id),
    entry_id TEXT NOT NULL REFERENCES entries (id) ON DELETE CASCADE,
    number INTEGER NOT NULL,
    response TEXT NOT NULL,
    chunks TEXT,
    actor TEXT NOT NULL,
    summary TEXT NOT NULL DEFAULT '',
    created_at DOUBLE PRECISION NOT NULL,
    UNIQUE (entry_id, number)
);

CREATE TABLE pending (
    id TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces (id),
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    fingerprint TEXT NOT NULL,
    model TEXT,
    request TEXT NOT NULL,
    stream INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL DEFAULT 'pending',
    entry_id TEXT,
    claimed_by TEXT,
    claim_expires_at DOUBLE PRECISION,
    created_at DOUBLE PRECISION NOT NULL,
    resolved_at DOUBLE PRECISION
);

-- At most one pending row per project and fingerprint: identical concurrent misses share it.
CREATE UNIQUE INDEX pending_one_per_fingerprint ON pending (project_id, fingerprint) WHERE status = 'pending';
CREATE INDEX pending_status_idx ON pending (status, id);

CREATE TABLE call_log (
    id TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces (id),
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
    token_id TEXT
);

CREATE INDEX call_log_created_idx ON call_log (created_at);
CREATE INDEX call_log_project_idx ON call_log (project_id, id);

CREATE TABLE audit_log (
    id TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces (id),
    created_at DOUBLE PRECISION NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT,
    fields TEXT NOT NULL DEFAULT '[]'
);

CREATE INDEX audit_log_workspace_idx ON audit_log (workspace_id, id);

CREATE TABLE tokens (
    id TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces (id),
    name TEXT NOT NULL DEFAULT '',
    hash TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL,
    scope TEXT NOT NULL,
    project_id TEXT REFERENCES projects (id) ON DELETE CASCADE,
    created_at DOUBLE PRECISION NOT NULL,
    revoked_at DOUBLE PRECISION
);

CREATE TABLE upstream_usage (
    project_id TEXT PRIMARY KEY REFERENCES projects (id) ON DELETE CASCADE,
    workspace_id TEXT NOT NULL REFERENCES workspaces (id),
    calls INTEGER NOT NULL DEFAULT 0,
    prompt_tokens BIGINT NOT NULL DEFAULT 0,
    completion_tokens BIGINT NOT NULL DEFAULT 0
);
