-- Sequences and replay sessions (docs/decisions/0036-sequences-and-sessions.md). An entry stays unique
-- per project and fingerprint and holds answer 1; answers 2..n of its sequence are entry_answers rows,
-- and entries.answers counts them all, so a replay hit learns "one answer, nothing to count" from the
-- row it reads anyway. session_calls counts, per session, how often each request was seen.
ALTER TABLE projects ADD COLUMN sequences TEXT NOT NULL DEFAULT 'off';
ALTER TABLE projects ADD COLUMN after_last TEXT NOT NULL DEFAULT 'repeat_last';
ALTER TABLE entries ADD COLUMN answers INTEGER NOT NULL DEFAULT 1;

CREATE TABLE entry_answers (
    workspace_id TEXT NOT NULL REFERENCES workspaces (id),
    entry_id TEXT NOT NULL REFERENCES entries (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    response TEXT NOT NULL,
    chunks TEXT,
    revision INTEGER NOT NULL DEFAULT 1,
    pinned INTEGER NOT NULL DEFAULT 0,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (entry_id, seq)
);

CREATE TABLE session_calls (
    workspace_id TEXT NOT NULL REFERENCES workspaces (id),
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    session TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    calls INTEGER NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (project_id, session, fingerprint)
);

-- A parked call records one answer of a sequence: identical misses share a row per answer number.
ALTER TABLE pending ADD COLUMN seq INTEGER NOT NULL DEFAULT 1;
DROP INDEX pending_one_per_fingerprint;
CREATE UNIQUE INDEX pending_one_per_answer ON pending (project_id, fingerprint, seq) WHERE status = 'pending';

-- Revisions are numbered per answer (0012 moves the unique key to entry, answer, number).
ALTER TABLE entry_revisions ADD COLUMN seq INTEGER NOT NULL DEFAULT 1;
