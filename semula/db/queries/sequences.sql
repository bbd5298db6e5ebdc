-- Statements of sequences and replay sessions (docs/decisions/0036-sequences-and-sessions.md).

-- name: count_session_call
-- The call number of this request in its session: one atomic statement on both databases, so two
-- identical calls in flight at once, in any processes, get distinct numbers.
-- (:n calls at once: service.sequences.Counts counts those of one request asked for together.)
-- `version`: the replay change counter (store.version()) as the same statement read it, so a kept
-- sequence's call is checked and counted in one round trip (service.hits, decision 0068).
INSERT INTO session_calls (workspace_id, project_id, session, fingerprint, calls, updated_at)
VALUES (:workspace_id, :project_id, :session, :fingerprint, :n, :now)
ON CONFLICT (project_id, session, fingerprint) DO UPDATE SET
    calls = session_calls.calls + excluded.calls, updated_at = excluded.updated_at
RETURNING calls, (SELECT counter FROM replay_changes WHERE id = 1) AS version

-- name: count_session_call.postgresql
INSERT INTO session_calls (workspace_id, project_id, session, fingerprint, calls, updated_at)
VALUES (:workspace_id, :project_id, :session, :fingerprint, :n, :now)
ON CONFLICT (project_id, session, fingerprint) DO UPDATE SET
    calls = session_calls.calls + excluded.calls, updated_at = excluded.updated_at
RETURNING calls, (SELECT counter FROM replay_changes WHERE workspace_id = :workspace_id) AS version

-- name: count_session_calls
-- The calls of several requests counted together (service.sequences.Counts, decision 0068): each row of
-- :rows adds its `n` calls to its counter, and the counter after them comes back. Rows come sorted by
-- their key, so two processes' statements take the counters' row locks in one order. :workspace_id is
-- every row's; `version` as count_session_call's.
INSERT INTO session_calls (workspace_id, project_id, session, fingerprint, calls, updated_at)
SELECT r.value ->> 'workspace_id', r.value ->> 'project_id', r.value ->> 'session', r.value ->> 'fingerprint',
    r.value ->> 'n', :now
FROM json_each(:rows) AS r WHERE true
ON CONFLICT (project_id, session, fingerprint) DO UPDATE SET
    calls = session_calls.calls + excluded.calls, updated_at = excluded.updated_at
RETURNING project_id, session, fingerprint, calls, (SELECT counter FROM replay_changes WHERE id = 1) AS version

-- name: count_session_calls.postgresql
INSERT INTO session_calls (workspace_id, project_id, session, fingerprint, calls, updated_at)
SELECT r.workspace_id, r.project_id, r.session, r.fingerprint, r.n, :now
FROM json_to_recordset(CAST(:rows AS JSON)) AS r (workspace_id TEXT, project_id TEXT, session TEXT,
    fingerprint TEXT, n INTEGER)
ON CONFLICT (project_id, session, fingerprint) DO UPDATE SET
    calls = session_calls.calls + excluded.calls, updated_at = excluded.updated_at
RETURNING project_id, session, fingerprint, calls,
    (SELECT counter FROM replay_changes WHERE workspace_id = :workspace_id) AS version

-- name: reset_session
DELETE FROM session_calls WHERE project_id = :project_id AND session = :session

-- name: entry_answer
SELECT seq, response, chunks, revision, pinned, meta FROM entry_answers WHERE entry_id = :entry_id AND workspace_id = :workspace_id AND seq = :seq

-- name: list_entry_answers
SELECT * FROM entry_answers WHERE entry_id = :entry_id AND workspace_id = :workspace_id ORDER BY seq

-- name: save_answer
-- Answer :seq (2 or more) of an entry's sequence as its newest revision, the entry's answer count
-- raised to it, the provider tokens counted as save_entry does; nothing for a pinned answer, a missing
-- entry or an answer whose predecessor is missing (sequences have no gaps).
INSERT INTO entry_answers (workspace_id, entry_id, seq, response, chunks, revision, pinned, created_at,
    updated_at)
SELECT :workspace_id, id, :seq, :response, :chunks, 1, 0, :now, :now FROM entries
WHERE project_id = :project_id AND fingerprint = :fingerprint AND answers >= :seq - 1
ON CONFLICT (entry_id, seq) DO UPDATE SET
    response = excluded.response, chunks = excluded.chunks, revision = entry_answers.revision + 1,
    updated_at = excluded.updated_at, meta = NULL
WHERE entry_answers.pinned = 0 AND entry_answers.workspace_id = excluded.workspace_id;
INSERT INTO entry_revisions (id, workspace_id, entry_id, seq, number, response, chunks, actor, summary,
    created_at)
SELECT :revision_id, :workspace_id, a.entry_id, a.seq, a.revision, :response, :chunks, :actor, :summary, :now
FROM entry_answers a JOIN entries e ON e.id = a.entry_id
WHERE e.project_id = :project_id AND e.fingerprint = :fingerprint AND a.seq = :seq AND changes() > 0;
UPDATE entries SET answers = MAX(answers, :seq), updated_at = :now
WHERE project_id = :project_id AND fingerprint = :fingerprint
  AND EXISTS (SELECT 1 FROM entry_revisions WHERE id = :revision_id AND workspace_id = :workspace_id);
UPDATE upstream_usage SET prompt_tokens = prompt_tokens + :prompt_tokens,
    completion_tokens = completion_tokens + :completion_tokens
WHERE project_id = :project_id AND :prompt_tokens + :completion_tokens > 0
  AND EXISTS (SELECT 1 FROM entry_revisions WHERE id = :revision_id AND workspace_id = :workspace_id);
SELECT entry_id AS id, number AS revision FROM entry_revisions WHERE id = :revision_id AND workspace_id = :workspace_id

-- name: save_answer.postgresql
WITH answer AS (
    INSERT INTO entry_answers (workspace_id, entry_id, seq, response, chunks, revision, pinned, created_at,
        updated_at)
    SELECT :workspace_id, id, :seq, :response, :chunks, 1, 0, :now, :now FROM entries
    WHERE project_id = :project_id AND fingerprint = :fingerprint AND answers >= CAST(:seq AS INTEGER) - 1
    ON CONFLICT (entry_id, seq) DO UPDATE SET
        response = excluded.response, chunks = excluded.chunks, revision = entry_answers.revision + 1,
        updated_at = excluded.updated_at, meta = NULL
    WHERE entry_answers.pinned = 0 AND entry_answers.workspace_id = excluded.workspace_id
    RETURNING entry_id, seq, revision
), revision AS (
    INSERT INTO entry_revisions (id, workspace_id, entry_id, seq, number, response, chunks, actor, summary,
        created_at)
    SELECT :revision_id, :workspace_id, entry_id, seq, revision, :response, :chunks, :actor, :summary, :now
    FROM answer
), bump AS (
    UPDATE entries SET answers = GREATEST(answers, CAST(:seq AS INTEGER)), updated_at = :now
    WHERE workspace_id = :workspace_id AND id IN (SELECT entry_id FROM answer)
), tokens AS (
    UPDATE upstream_usage SET prompt_tokens = prompt_tokens + :prompt_tokens,
        completion_tokens = completion_tokens + :completion_tokens
    WHERE project_id = :project_id
      AND CAST(:prompt_tokens AS BIGINT) + CAST(:completion_tokens AS BIGINT) > 0
      AND EXISTS (SELECT 1 FROM answer)
)
SELECT entry_id AS id, revision FROM answer

-- name: session_call_count
SELECT calls FROM session_calls WHERE project_id = :project_id AND session = :session AND fingerprint = :fingerprint

-- name: import_answer
-- Answer :seq of an imported sequence: new, or a new revision of the one there.
INSERT INTO entry_answers (workspace_id, entry_id, seq, response, chunks, revision, pinned, created_at,
    updated_at, meta)
VALUES (:workspace_id, :entry_id, :seq, :response, :chunks, 1, :pinned, :now, :now, :meta)
ON CONFLICT (entry_id, seq) DO UPDATE SET
    response = excluded.response, chunks = excluded.chunks, revision = entry_answers.revision + 1,
    pinned = excluded.pinned, updated_at = excluded.updated_at, meta = excluded.meta
WHERE entry_answers.workspace_id = excluded.workspace_id
RETURNING revision

-- name: import_new_answer
-- Answer :seq of a sequence the import has just created the entry of: its first revision.
INSERT INTO entry_answers (workspace_id, entry_id, seq, response, chunks, revision, pinned, created_at,
    updated_at, meta)
VALUES (:workspace_id, :entry_id, :seq, :response, :chunks, :number, :pinned, :now, :now, :meta)

-- name: answers_of_entries
-- Answers 2..n of the entries in :entry_ids (a JSON array), by entry and seq: one query per import batch.
SELECT * FROM entry_answers
WHERE workspace_id = :workspace_id AND entry_id IN (SELECT value FROM json_each(:entry_ids)) ORDER BY entry_id, seq

-- name: answers_of_entries.postgresql
SELECT * FROM entry_answers
WHERE workspace_id = :workspace_id AND entry_id IN (SELECT jsonb_array_elements_text(CAST(:entry_ids AS jsonb)))
ORDER BY entry_id, seq

-- name: import_answer_marks
-- Answer :seq of an imported sequence whose answers are the ones stored and only this answer's pin
-- or meta differs: the bundle's, no new revision (as import_entry_marks).
UPDATE entry_answers SET meta = :meta, pinned = :pinned, updated_at = :now
WHERE entry_id = :entry_id AND workspace_id = :workspace_id AND seq = :seq

-- name: drop_answers_after
DELETE FROM entry_answers WHERE entry_id = :entry_id AND workspace_id = :workspace_id AND seq > :answers

-- name: drop_revisions_after
DELETE FROM entry_revisions WHERE entry_id = :entry_id AND workspace_id = :workspace_id AND seq > :answers

-- name: insert_answer_revision
INSERT INTO entry_revisions (id, workspace_id, entry_id, seq, number, response, chunks, actor, summary,
    created_at)
VALUES (:id, :workspace_id, :entry_id, :seq, :number, :response, :chunks, :actor, :summary, :now)

-- name: session_counters
SELECT session, fingerprint, calls, updated_at FROM session_calls WHERE project_id = :project_id

-- name: prune_session_counters
-- across workspaces: retention, the same for every workspace.
-- One small batch of sessions whose last counted call is before :cutoff (retention, decision 0041). A
-- session goes whole: one still in use never has some of its requests start over.
DELETE FROM session_calls WHERE (project_id, session) IN (
    SELECT project_id, session FROM session_calls
    GROUP BY project_id, session
    HAVING MAX(updated_at) < :cutoff
    LIMIT :batch
)

-- One answer of a sequence on every surface (docs/decisions/0041-sequence-surfaces-and-record-through.md).

-- name: replace_answer_response
-- A human edit or revert of answer :seq (2 or more): a new revision of that answer.
UPDATE entry_answers SET response = :response, chunks = :chunks, revision = revision + 1, updated_at = :now
WHERE entry_id = :entry_id AND workspace_id = :workspace_id AND seq = :seq
RETURNING revision

-- name: entry_unreviewed
-- One of the entry's answers changed by hand: the entry has not been reviewed since.
UPDATE entries SET review_status = 'unreviewed', updated_at = :now WHERE id = :id AND workspace_id = :workspace_id

-- name: set_answer_pinned
UPDATE entry_answers SET pinned = :pinned, updated_at = :now WHERE entry_id = :entry_id AND workspace_id = :workspace_id AND seq = :seq

-- name: lock_entry_answers
-- The first statement of a reorder or delete: takes the entry's row (PostgreSQL's row lock; SQLite's
-- write lock) before its answers are read, so two rearrangements run one after the other.
UPDATE entries SET updated_at = :now WHERE id = :id AND workspace_id = :workspace_id
RETURNING answers

-- name: set_first_answer
-- Answer 1 after a reorder or delete: the entry row takes that answer with its revision number and pin.
UPDATE entries SET response = :response, chunks = :chunks, revision = :revision, pinned = :pinned,
    response_id = :response_id, meta = :meta, answers = :answers, updated_at = :now
WHERE id = :id AND workspace_id = :workspace_id

-- name: restore_answer
INSERT INTO entry_answers (workspace_id, entry_id, seq, response, chunks, revision, pinned, created_at,
    updated_at, meta)
VALUES (:workspace_id, :entry_id, :seq, :response, :chunks, :revision, :pinned, :created_at, :now, :meta)

-- name: drop_answer_revisions
DELETE FROM entry_revisions WHERE entry_id = :entry_id AND workspace_id = :workspace_id AND seq = :seq

-- name: move_answer_revisions
-- Renumbered in two steps (to -:to, then flipped), so no step meets the unique key (entry, seq, number).
UPDATE entry_revisions SET seq = -CAST(:to AS INTEGER) WHERE entry_id = :entry_id AND workspace_id = :workspace_id AND seq = :seq

-- name: settle_answer_revisions
UPDATE entry_revisions SET seq = -seq WHERE entry_id = :entry_id AND workspace_id = :workspace_id AND seq < 0

-- name: append_answer
-- Record-through in a session that records sequences (decision 0041): the answer as the next of its
-- request's sequence, answer 1 (a new entry) when the request has none. Nothing when another append
-- took the number meanwhile (PostgreSQL); the caller tries again. Tokens are counted as save_entry does.
INSERT INTO entries (id, workspace_id, project_id, fingerprint, model, request, response, chunks, revision,
    pinned, review_status, created_at, updated_at, api, response_id, meta)
VALUES (:id, :workspace_id, :project_id, :fingerprint, :model, :request, :response, :chunks, 1,
    0, 'unreviewed', :now, :now, :api, :response_id, :meta)
ON CONFLICT (project_id, fingerprint) DO NOTHING;
INSERT INTO entry_revisions (id, workspace_id, entry_id, seq, number, response, chunks, actor, summary,
    created_at)
SELECT :revision_id, :workspace_id, id, 1, 1, :response, :chunks, :actor, :summary, :now
FROM entries WHERE id = :id AND workspace_id = :workspace_id AND changes() > 0;
INSERT INTO entry_answers (workspace_id, entry_id, seq, response, chunks, revision, pinned, created_at,
    updated_at, meta)
SELECT :workspace_id, id, answers + 1, :response, :chunks, 1, 0, :now, :now, :meta FROM entries
WHERE project_id = :project_id AND fingerprint = :fingerprint
  AND NOT EXISTS (SELECT 1 FROM entry_revisions WHERE id = :revision_id AND workspace_id = :workspace_id);
INSERT INTO entry_revisions (id, workspace_id, entry_id, seq, number, response, chunks, actor, summary,
    created_at)
SELECT :revision_id, :workspace_id, id, answers + 1, 1, :response, :chunks, :actor, :summary, :now
FROM entries WHERE project_id = :project_id AND fingerprint = :fingerprint AND changes() > 0;
UPDATE entries SET answers = answers + 1, updated_at = :now
WHERE project_id = :project_id AND fingerprint = :fingerprint
  AND EXISTS (SELECT 1 FROM entry_revisions WHERE id = :revision_id AND seq > 1 AND workspace_id = :workspace_id);
UPDATE upstream_usage SET prompt_tokens = prompt_tokens + :prompt_tokens,
    completion_tokens = completion_tokens + :completion_tokens
WHERE project_id = :project_id AND :prompt_tokens + :completion_tokens > 0
  AND EXISTS (SELECT 1 FROM entry_revisions WHERE id = :revision_id AND workspace_id = :workspace_id);
SELECT entry_id AS id, seq, number AS revision FROM entry_revisions WHERE id = :revision_id AND workspace_id = :workspace_id

-- name: append_answer.postgresql
WITH created AS (
    INSERT INTO entries (id, workspace_id, project_id, fingerprint, model, request, response, chunks,
        revision, pinned, review_status, created_at, updated_at, api, response_id, meta)
    VALUES (:id, :workspace_id, :project_id, :fingerprint, :model, :request, :response, :chunks, 1,
        0, 'unreviewed', :now, :now, :api, :response_id, :meta)
    ON CONFLICT (project_id, fingerprint) DO NOTHING
    RETURNING id
), first_revision AS (
    INSERT INTO entry_revisions (id, workspace_id, entry_id, seq, number, response, chunks, actor, summary,
        created_at)
    SELECT :revision_id, :workspace_id, id, 1, 1, :response, :chunks, :actor, :summary, :now FROM created
), appended AS (
    INSERT INTO entry_answers (workspace_id, entry_id, seq, response, chunks, revision, pinned, created_at,
        updated_at, meta)
    SELECT :workspace_id, id, answers + 1, :response, :chunks, 1, 0, :now, :now, :meta FROM entries
    WHERE project_id = :project_id AND fingerprint = :fingerprint AND NOT EXISTS (SELECT 1 FROM created)
    ON CONFLICT (entry_id, seq) DO NOTHING
    RETURNING entry_id, seq
), later_revision AS (
    INSERT INTO entry_revisions (id, workspace_id, entry_id, seq, number, response, chunks, actor, summary,
        created_at)
    SELECT :revision_id, :workspace_id, entry_id, seq, 1, :response, :chunks, :actor, :summary, :now
    FROM appended
), bump AS (
    UPDATE entries SET answers = GREATEST(entries.answers, appended.seq), updated_at = :now
    FROM appended WHERE entries.id = appended.entry_id AND entries.workspace_id = :workspace_id
), tokens AS (
    UPDATE upstream_usage SET prompt_tokens = prompt_tokens + :prompt_tokens,
        completion_tokens = completion_tokens + :completion_tokens
    WHERE project_id = :project_id
      AND CAST(:prompt_tokens AS BIGINT) + CAST(:completion_tokens AS BIGINT) > 0
      AND (EXISTS (SELECT 1 FROM created) OR EXISTS (SELECT 1 FROM appended))
)
SELECT id, 1 AS seq, 1 AS revision FROM created
UNION ALL
SELECT entry_id, seq, 1 FROM appended
