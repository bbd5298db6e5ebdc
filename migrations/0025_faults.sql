-- Fault rules (issue #50, docs/decisions/0061-fault-rules.md): a project's `faults` setting holds its
-- rules and its sessions' and entries' (a rule names its session or entry), so the replay path reads
-- them with the project row it reads anyway. fault_counts counts, per rule and replay session ('' when
-- none), the calls the rule matched and the faults it injected, one small transaction per call, so
-- `times` and a seeded `probability` give the same calls their fault in every process and host.
ALTER TABLE projects ADD COLUMN faults TEXT NOT NULL DEFAULT '[]';

CREATE TABLE fault_counts (
    workspace_id TEXT NOT NULL REFERENCES workspaces (id),
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    session TEXT NOT NULL,
    rule TEXT NOT NULL,
    calls INTEGER NOT NULL,
    fired INTEGER NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (project_id, session, rule)
);
