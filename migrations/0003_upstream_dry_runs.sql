-- Record-through dry runs (docs/design/record-through.md): the distinct prompts that would have been forwarded, with counts.
CREATE TABLE upstream_dry_runs (
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    fingerprint TEXT NOT NULL,
    workspace_id TEXT NOT NULL REFERENCES workspaces (id),
    model TEXT,
    request TEXT NOT NULL,
    count INTEGER NOT NULL DEFAULT 1,
    first_seen DOUBLE PRECISION NOT NULL,
    last_seen DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (project_id, fingerprint)
);
