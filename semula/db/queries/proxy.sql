-- Statements of the proxy: entries lookup and save, parking, the call log.

-- name: entry_by_fingerprint
SELECT id, response, chunks, review_status, model, meta, answers FROM entries
WHERE project_id = :project_id AND fingerprint = :fingerprint

-- name: entries_at_version.postgresql
-- store.entry_at_version(): the entries of one project for several fingerprints, each row with the
-- workspace's replay change counter read in the same statement (one row with no entry when none is
-- found, so the counter always comes back).
SELECT counter.counter AS version, found.* FROM (SELECT 1) AS one
LEFT JOIN replay_changes AS counter ON counter.workspace_id = :workspace_id
LEFT JOIN (
    SELECT fingerprint AS found_fingerprint, id, response, chunks, review_status, model, meta, answers
    FROM entries WHERE project_id = :project_id AND fingerprint = ANY(:fingerprints)
) AS found ON TRUE

-- name: replay_counter.postgresql
-- store.version(): the workspace's replay change counter (0017_replay_changes.postgresql.sql).
SELECT counter FROM replay_changes WHERE workspace_id = :workspace_id

-- name: get_entry
SELECT * FROM entries WHERE id = :id AND workspace_id = :workspace_id

-- name: entry_by_response_id
-- A Responses API entry by the id of its recorded response (previous_response_id, GET /v1/responses/{id}).
SELECT id, request, response, chunks, review_status, model, meta FROM entries
WHERE project_id = :project_id AND response_id = :response_id
ORDER BY id DESC
LIMIT 1

-- name: entry_candidates
-- The newest entries a replay miss is compared with, of the request's model (entries_candidates_idx:
-- it reads :limit rows, however many entries the project has).
SELECT id, request, answers FROM entries
WHERE project_id = :project_id AND api = :api AND model = :model AND review_status <> 'rejected'
ORDER BY id DESC
LIMIT :limit

-- name: entry_candidates_other_models
-- The rest when the model has fewer than :limit entries: those it passes over are then fewer than
-- :limit too (entries_api_idx).
SELECT id, request, answers FROM entries
WHERE project_id = :project_id AND api = :api AND (model IS NULL OR model <> :model)
  AND review_status <> 'rejected'
ORDER BY id DESC
LIMIT :limit

-- name: save_entry
-- An answer as the entry's newest revision (its first, or one more), with the provider tokens it
-- spent counted (record-through; 0 and 0 otherwise), and nothing at all for a pinned entry. SQLite
-- runs these statements in order, in one transaction (semula.db.sqlite); on PostgreSQL it is one
-- statement (one round trip).
INSERT INTO entries (id, workspace_id, project_id, fingerprint, model, request, response, chunks, revision,
    pinned, review_status, created_at, updated_at, api, response_id, meta)
VALUES (:id, :workspace_id, :project_id, :fingerprint, :model, :request, :response, :chunks, 1,
    0, 'unreviewed', :now, :now, :api, :response_id, :meta)
ON CONFLICT (project_id, fingerprint) DO UPDATE SET
    response = excluded.response, chunks = excluded.chunks, revision = entries.revision + 1,
    review_status = 'unreviewed', updated_at = excluded.updated_at, response_id = excluded.response_id,
    meta = excluded.meta
WHERE entries.pinned = 0;
INSERT INTO entry_revisions (id, workspace_id, entry_id, number, response, chunks, actor, summary, created_at)
SELECT :revision_id, :workspace_id, id, revision, :response, :chunks, :actor, :summary, :now
FROM entries WHERE project_id = :project_id AND fingerprint = :fingerprint AND changes() > 0;
UPDATE upstream_usage SET prompt_tokens = prompt_tokens + :prompt_tokens,
    completion_tokens = completion_tokens + :completion_tokens
WHERE project_id = :project_id AND :prompt_tokens + :completion_tokens > 0
  AND EXISTS (SELECT 1 FROM entry_revisions WHERE id = :revision_id AND workspace_id = :workspace_id);
SELECT entry_id AS id, number AS revision FROM entry_revisions WHERE id = :revision_id AND workspace_id = :workspace_id

-- name: save_entry.postgresql
WITH entry AS (
    INSERT INTO entries (id, workspace_id, project_id, fingerprint, model, request, response, chunks,
        revision, pinned, review_status, created_at, updated_at, api, response_id, meta)
    VALUES (:id, :workspace_id, :project_id, :fingerprint, :model, :request, :response, :chunks, 1,
        0, 'unreviewed', :now, :now, :api, :response_id, :meta)
    ON CONFLICT (project_id, fingerprint) DO UPDATE SET
        response = excluded.response, chunks = excluded.chunks, revision = entries.revision + 1,
        review_status = 'unreviewed', updated_at = excluded.updated_at, response_id = excluded.response_id,
        meta = excluded.meta
    WHERE entries.pinned = 0
    RETURNING id, revision
), revision AS (
    INSERT INTO entry_revisions (id, workspace_id, entry_id, number, response, chunks, actor, summary,
        created_at)
    SELECT :revision_id, :workspace_id, id, revision, :response, :chunks, :actor, :summary, :now FROM entry
), tokens AS (
    UPDATE upstream_usage SET prompt_tokens = prompt_tokens + :prompt_tokens,
        completion_tokens = completion_tokens + :completion_tokens
    WHERE project_id = :project_id
      AND CAST(:prompt_tokens AS BIGINT) + CAST(:completion_tokens AS BIGINT) > 0
      AND EXISTS (SELECT 1 FROM entry)
)
SELECT id, revision FROM entry

-- name: insert_revision
INSERT INTO entry_revisions (id, workspace_id, entry_id, number, response, chunks, actor, summary, created_at)
VALUES (:id, :workspace_id, :entry_id, :number, :response, :chunks, :actor, :summary, :now)

-- name: insert_pending
-- Parks a miss unless the project already has max_misses parked (pending_parked, kept by migration 0028's
-- triggers: a count of the pending rows cost each park the number parked); the partial unique index makes
-- identical concurrent misses share one row.
INSERT INTO pending (id, workspace_id, project_id, fingerprint, model, request, stream, status, created_at, api,
    seq, held_until, holders)
SELECT :id, :workspace_id, :project_id, :fingerprint, :model, :request, :stream, 'pending', :now, :api, :seq,
    :held_until, 1
WHERE (SELECT COALESCE(SUM(parked), 0) FROM pending_parked WHERE project_id = :project_id) < :max_misses
ON CONFLICT (project_id, fingerprint, seq) WHERE status = 'pending' DO NOTHING
RETURNING id, hold_epoch

-- name: pending_by_fingerprint
-- The parked call for one answer of a request's sequence (answer 1 outside sessions).
SELECT id FROM pending
WHERE project_id = :project_id AND fingerprint = :fingerprint AND seq = :seq AND status = 'pending'

-- name: join_pending
-- One more request holds a parked call (migration 0027): counted from 1 when its lease had lapsed, in a
-- new epoch (migration 0029: a live holder that could not renew is added back by its next renewal).
UPDATE pending SET holders = CASE WHEN COALESCE(held_until, 0) <= :now THEN 1 ELSE holders + 1 END,
    hold_epoch = CASE WHEN COALESCE(held_until, 0) <= :now THEN hold_epoch + 1 ELSE hold_epoch END,
    held_until = :held_until
WHERE id = :id AND workspace_id = :workspace_id AND status = 'pending'
RETURNING hold_epoch

-- name: get_pending
SELECT pd.*, p.name AS project_name FROM pending pd JOIN projects p ON p.id = pd.project_id
WHERE pd.id = :id AND pd.workspace_id = :workspace_id

-- name: resolve_pending
UPDATE pending SET status = :status, entry_id = :entry_id, resolved_at = :now, claimed_by = NULL,
    claim_expires_at = NULL
WHERE id = :id AND workspace_id = :workspace_id AND status = 'pending'

-- name: resolved_among
-- across workspaces: one process holds calls of every workspace, by their unguessable ids.
-- The held calls (a JSON array of ids) that are no longer pending: one query per poll, whatever the count.
SELECT id, status, entry_id, resolved_at FROM pending
WHERE id IN (SELECT value FROM json_each(:ids)) AND status <> 'pending'

-- name: resolved_among.postgresql
-- Through an owner-run function: one process holds calls of every workspace, row-level security or not.
SELECT * FROM semula_resolved_among(CAST(:ids AS jsonb))

-- name: resolved_since
-- across workspaces: one process holds calls of every workspace; it keeps the ids it parked only.
-- The calls resolved at or after :since (migration 0028's index): a poll of many held calls by time, its
-- cost the calls resolved meanwhile, not the calls held (docs/decisions/0080-held-calls-at-scale.md).
SELECT id, status, entry_id, resolved_at FROM pending WHERE resolved_at >= :since AND status <> 'pending'

-- name: resolved_since.postgresql
SELECT * FROM semula_resolved_since(:since)

-- name: hold_among
-- The held calls (a JSON array of ids) still pending are held until :until (a renewal), or were let go
-- at :until (their last client here went away or gave up): migration 0024.
-- across workspaces: a process's held calls, whichever workspace parked them, by the ids it parked.
UPDATE pending SET held_until = :until
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'pending'

-- name: hold_among.postgresql
SELECT semula_hold_among(CAST(:ids AS jsonb), :until)

-- name: renew_held
-- The calls a process holds (:held, a JSON array of [id, epoch, holders], one per call and epoch its
-- holders there were counted in) are waited for until :until, and its holders counted in an epoch that is
-- no longer the call's (a join counted from 1 while this process could not renew) are added back
-- (migration 0029). Returns each call's epoch, the one all its holders there are counted in now.
-- across workspaces: a process's held calls, whichever workspace parked them, by the ids it parked.
UPDATE pending SET held_until = :until,
    holders = holders + COALESCE((
        SELECT SUM(json_extract(h.value, '$[2]')) FROM json_each(:held) h
        WHERE json_extract(h.value, '$[0]') = pending.id AND json_extract(h.value, '$[1]') <> pending.hold_epoch), 0)
WHERE id IN (SELECT json_extract(value, '$[0]') FROM json_each(:held)) AND status = 'pending'
RETURNING id, hold_epoch

-- name: renew_held.postgresql
SELECT id, hold_epoch FROM semula_renew_held(CAST(:held AS jsonb), :until)

-- name: let_go
-- A request holding the call ended without its answer (migration 0027): one holder fewer in the count
-- of its epoch (none when the count is another epoch's, which it is not in: migration 0029), and the
-- last one lets it go at :now (abandoned).
-- across workspaces: a process's held calls, whichever workspace parked them, by the ids it parked.
UPDATE pending SET holders = MAX(holders - 1, 0), held_until = CASE WHEN holders <= 1 THEN :now ELSE held_until END
WHERE id = :id AND status = 'pending' AND hold_epoch = :epoch

-- name: let_go.postgresql
SELECT semula_let_go(:id, :now, :epoch)

-- name: insert_calls
-- The call log's rows, written by Tx.many (semula.service.calllog): on SQLite once per row, which
-- costs half the time of one statement over a JSON array there.
INSERT INTO call_log (id, workspace_id, project_id, created_at, fingerprint, model, stream, outcome, status,
    duration_ms, entry_id, pending_id, token_id, api, fault)
VALUES (:id, :workspace_id, :project_id, :created_at, :fingerprint, :model, :stream, :outcome, :status,
    :duration_ms, :entry_id, :pending_id, :token_id, :api, :fault)

-- name: insert_calls.postgresql
-- On PostgreSQL all of them as one JSON array: one statement, however many rows. Read as json, not
-- jsonb: the rows are taken apart once, and building jsonb first cost the database 2-4 us a row more
-- (docs/decisions/0048-call-log-rows.md).
INSERT INTO call_log (id, workspace_id, project_id, created_at, fingerprint, model, stream, outcome, status,
    duration_ms, entry_id, pending_id, token_id, api, fault)
SELECT * FROM json_to_recordset(CAST(:rows AS JSON)) AS r (id TEXT, workspace_id TEXT, project_id TEXT, created_at DOUBLE PRECISION, fingerprint TEXT, model TEXT, stream INTEGER, outcome TEXT, status INTEGER, duration_ms DOUBLE PRECISION, entry_id TEXT, pending_id TEXT, token_id TEXT, api TEXT, fault TEXT)

-- name: models_in_project
SELECT DISTINCT model FROM entries WHERE project_id = :project_id AND model IS NOT NULL ORDER BY model

-- name: parked_in_project
SELECT id, fingerprint FROM pending WHERE project_id = :project_id AND status = 'pending' ORDER BY id

-- name: calls_in_project
SELECT * FROM call_log WHERE project_id = :project_id ORDER BY id

-- name: set_review_status
UPDATE entries SET review_status = :review_status, updated_at = :now WHERE id = :id AND workspace_id = :workspace_id

-- name: entry_apis_in_project
-- How many entries a project holds of each API: a miss with none of its own API names the others.
SELECT api, COUNT(*) AS n FROM entries WHERE project_id = :project_id GROUP BY api ORDER BY api
