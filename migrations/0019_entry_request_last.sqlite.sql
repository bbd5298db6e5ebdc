-- An entry's request becomes the last column of its row (docs/decisions/0045-first-sight-path.md).
-- SQLite keeps a row's columns in order and spills a long one onto a chain of overflow pages, which
-- a read of any later column walks page by page: the replay's lookup, which reads the response and
-- never the request, read ~22 pages more for an agent's 88 KB request (~45 us of a first sight).
-- ADD COLUMN appends; DROP COLUMN rewrites the table in place (no row is deleted, so no foreign key
-- action runs on the revisions and answers that reference entries). The change trigger is set aside
-- while the rows are copied (one counter move for the whole migration, not one per entry).
DROP TRIGGER entries_update_changes;

ALTER TABLE entries ADD COLUMN request_last TEXT NOT NULL DEFAULT '';

UPDATE entries SET request_last = request;

ALTER TABLE entries DROP COLUMN request;

ALTER TABLE entries RENAME COLUMN request_last TO request;

CREATE TRIGGER entries_update_changes AFTER UPDATE ON entries
BEGIN
    UPDATE replay_changes SET counter = counter + 1;
END;

UPDATE replay_changes SET counter = counter + 1;
