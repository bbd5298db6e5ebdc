-- Dashboard sessions (issue #15 item 5; docs/decisions/0038-dashboard-sessions.md): the cookie
-- carries a random secret, the row only its SHA-256, so a session can be ended on the server.
CREATE TABLE ui_sessions (
    id TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces (id),
    token_id TEXT NOT NULL REFERENCES tokens (id) ON DELETE CASCADE,
    hash TEXT NOT NULL UNIQUE,
    created_at DOUBLE PRECISION NOT NULL,
    last_seen_at DOUBLE PRECISION NOT NULL,
    ended_at DOUBLE PRECISION
);
CREATE INDEX ui_sessions_token_idx ON ui_sessions (token_id, id);
