-- Single flight across the deployment (docs/decisions/0057-several-hosts.md): one row per
-- record-through call in flight, keyed like the answer it will record (a project's fingerprint and its
-- place in a sequence, 1 outside sessions). The process that inserts it calls the provider; the others
-- wait for the entry. `holder` names the flight (a random id), `expires_at` is its lease, renewed while
-- the call runs, so a holder that died is taken over once it ends. A call that failed leaves its error
-- here (the app-facing error as JSON, already redacted) with its lease ended, for the waiters to share.
CREATE TABLE upstream_flights (
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    fingerprint TEXT NOT NULL,
    seq INTEGER NOT NULL,
    workspace_id TEXT NOT NULL REFERENCES workspaces (id),
    holder TEXT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    error TEXT,
    PRIMARY KEY (project_id, fingerprint, seq)
);
