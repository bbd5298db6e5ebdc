-- Statements of the entries lifecycle (docs/design/product.md §6, §7): list and search, revisions, pin, delete,
-- export and import of bundles, and reading and pruning the call log.

-- name: list_entries
-- Newest first. :text is a lowercased LIKE pattern with \ as its escape character; the JSON text is
-- searched, so the caller encodes the term as JSON would.
SELECT e.*, p.name AS project_name FROM entries e JOIN projects p ON p.id = e.project_id
WHERE e.project_id = :project_id
  AND (CAST(:model AS TEXT) IS NULL OR e.model = :model)
  AND (CAST(:review_status AS TEXT) IS NULL OR e.review_status = :review_status)
  AND (CAST(:pinned AS INTEGER) IS NULL OR e.pinned = :pinned)
  AND (CAST(:text AS TEXT) IS NULL
       OR LOWER(e.request) LIKE :text ESCAPE '\' OR LOWER(e.response) LIKE :text ESCAPE '\')
  AND (CAST(:after AS TEXT) IS NULL OR e.id < :after)
ORDER BY e.id DESC
LIMIT :limit

-- name: get_entry_in_workspace
SELECT e.*, p.name AS project_name FROM entries e JOIN projects p ON p.id = e.project_id
WHERE e.id = :id AND e.workspace_id = :workspace_id

-- name: list_revisions
-- Every answer's revisions: by answer, then number.
SELECT * FROM entry_revisions WHERE entry_id = :entry_id AND workspace_id = :workspace_id ORDER BY seq, number

-- name: get_revision
SELECT * FROM entry_revisions WHERE entry_id = :entry_id AND workspace_id = :workspace_id AND seq = :seq AND number = :number

-- name: replace_entry_response
-- A human edit or revert: a new response is a new revision and has not been reviewed yet.
UPDATE entries SET response = :response, chunks = :chunks, revision = revision + 1,
    review_status = 'unreviewed', updated_at = :now
WHERE id = :id AND workspace_id = :workspace_id
RETURNING id, revision

-- name: set_entry_pinned
UPDATE entries SET pinned = :pinned, updated_at = :now WHERE id = :id AND workspace_id = :workspace_id

-- name: delete_entry
DELETE FROM entries WHERE id = :id AND workspace_id = :workspace_id

-- name: export_entries
-- Bundle order: by fingerprint, byte order, so the same entries always export the same way.
SELECT id, fingerprint, request, response, chunks, pinned, review_status, api, meta, answers FROM entries
WHERE project_id = :project_id
ORDER BY fingerprint

-- name: export_entries.postgresql
SELECT id, fingerprint, request, response, chunks, pinned, review_status, api, meta, answers FROM entries
WHERE project_id = :project_id
ORDER BY fingerprint COLLATE "C"

-- name: entries_by_fingerprints
-- :fingerprints is a JSON array: one query per import batch, whatever its size.
SELECT id, fingerprint, request, response, chunks, revision, pinned, review_status, answers, meta FROM entries
WHERE project_id = :project_id AND fingerprint IN (SELECT value FROM json_each(:fingerprints))

-- name: entries_by_fingerprints.postgresql
SELECT id, fingerprint, request, response, chunks, revision, pinned, review_status, answers, meta FROM entries
WHERE project_id = :project_id
  AND fingerprint IN (SELECT jsonb_array_elements_text(CAST(:fingerprints AS jsonb)))

-- name: import_insert_entry
INSERT INTO entries (id, workspace_id, project_id, fingerprint, model, request, response, chunks, revision,
    pinned, review_status, created_at, updated_at, api, response_id, meta, answers)
VALUES (:id, :workspace_id, :project_id, :fingerprint, :model, :request, :response, :chunks, 1,
    :pinned, :review_status, :now, :now, :api, :response_id, :meta, :answers)

-- name: import_update_entry
UPDATE entries SET model = :model, request = :request, response = :response, chunks = :chunks,
    revision = :revision, pinned = :pinned, review_status = :review_status, updated_at = :now,
    api = :api, response_id = :response_id, meta = :meta, answers = :answers
WHERE id = :id AND workspace_id = :workspace_id AND pinned = 0

-- name: import_entry_marks
-- An imported entry whose answers are the ones stored and only its pin, review or recorded headers
-- and stream timing differ: the bundle's, with no new revision (revisions record answers, and none
-- of these is one; pinning and reviewing an entry add none either).
UPDATE entries SET meta = :meta, pinned = :pinned, review_status = :review_status, updated_at = :now
WHERE id = :id AND workspace_id = :workspace_id AND pinned = 0

-- name: list_call_log
-- Newest first; :after continues past that id.
SELECT c.*, p.name AS project_name FROM call_log c JOIN projects p ON p.id = c.project_id
WHERE c.project_id = :project_id
  AND (CAST(:outcome AS TEXT) IS NULL OR c.outcome = :outcome)
  AND (CAST(:after AS TEXT) IS NULL OR c.id < :after)
ORDER BY c.id DESC
LIMIT :limit

-- name: prune_call_log
-- across workspaces: retention, the same for every workspace.
-- One small batch of expired rows, oldest first, so each delete is a short transaction.
DELETE FROM call_log WHERE id IN (
    SELECT id FROM call_log WHERE created_at < :cutoff ORDER BY created_at LIMIT :batch
)

-- name: entry_fingerprints
-- Every entry of a project as its fingerprint is made: what re-fingerprinting reads.
SELECT id, fingerprint, request, api FROM entries WHERE project_id = :project_id ORDER BY id

-- name: set_entry_fingerprint
UPDATE entries SET fingerprint = :fingerprint, updated_at = :now WHERE id = :id AND project_id = :project_id
