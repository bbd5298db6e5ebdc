-- What a kept replay hit depends on (docs/decisions/0040-replay-change-counter.md): one counter that
-- every change of a row an answer is made of moves, in the same transaction, by trigger, so no
-- statement written later can forget it. store.version() reads it only when the WAL-index header
-- moved, so the call log, session counters, parked calls, audit rows and token touches no longer
-- end every kept hit of every process. A table added later that a replay answer reads needs the
-- same three triggers (a test checks the list in semula/db/sqlite.py).

CREATE TABLE replay_changes (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    counter INTEGER NOT NULL
);

INSERT INTO replay_changes (id, counter) VALUES (1, 0);

CREATE TRIGGER workspaces_insert_changes AFTER INSERT ON workspaces
BEGIN
    UPDATE replay_changes SET counter = counter + 1;
END;

CREATE TRIGGER workspaces_update_changes AFTER UPDATE ON workspaces
BEGIN
    UPDATE replay_changes SET counter = counter + 1;
END;

CREATE TRIGGER workspaces_delete_changes AFTER DELETE ON workspaces
BEGIN
    UPDATE replay_changes SET counter = counter + 1;
END;

CREATE TRIGGER projects_insert_changes AFTER INSERT ON projects
BEGIN
    UPDATE replay_changes SET counter = counter + 1;
END;

CREATE TRIGGER projects_update_changes AFTER UPDATE ON projects
BEGIN
    UPDATE replay_changes SET counter = counter + 1;
END;

CREATE TRIGGER projects_delete_changes AFTER DELETE ON projects
BEGIN
    UPDATE replay_changes SET counter = counter + 1;
END;

CREATE TRIGGER entries_insert_changes AFTER INSERT ON entries
BEGIN
    UPDATE replay_changes SET counter = counter + 1;
END;

CREATE TRIGGER entries_update_changes AFTER UPDATE ON entries
BEGIN
    UPDATE replay_changes SET counter = counter + 1;
END;

CREATE TRIGGER entries_delete_changes AFTER DELETE ON entries
BEGIN
    UPDATE replay_changes SET counter = counter + 1;
END;

CREATE TRIGGER entry_answers_insert_changes AFTER INSERT ON entry_answers
BEGIN
    UPDATE replay_changes SET counter = counter + 1;
END;

CREATE TRIGGER entry_answers_update_changes AFTER UPDATE ON entry_answers
BEGIN
    UPDATE replay_changes SET counter = counter + 1;
END;

CREATE TRIGGER entry_answers_delete_changes AFTER DELETE ON entry_answers
BEGIN
    UPDATE replay_changes SET counter = counter + 1;
END;

CREATE TRIGGER tokens_insert_changes AFTER INSERT ON tokens
BEGIN
    UPDATE replay_changes SET counter = counter + 1;
END;

-- Not last_used_at: a token's touch (once a minute) changes no answer.

CREATE TRIGGER tokens_update_changes AFTER UPDATE OF workspace_id, hash, role, scope, project_id, revoked_at, expires_at ON tokens
BEGIN
    UPDATE replay_changes SET counter = counter + 1;
END;

CREATE TRIGGER tokens_delete_changes AFTER DELETE ON tokens
BEGIN
    UPDATE replay_changes SET counter = counter + 1;
END;
