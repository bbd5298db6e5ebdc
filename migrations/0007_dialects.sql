-- Dialects (docs/decisions/0030-dialects.md): entries, parked calls and call-log rows name the API
-- they belong to; rows from before are Chat Completions. A Responses API entry keeps the id of its
-- response, which a follow-up request names in previous_response_id.
ALTER TABLE entries ADD COLUMN api TEXT NOT NULL DEFAULT 'openai.chat';
ALTER TABLE entries ADD COLUMN response_id TEXT;
CREATE INDEX entries_response_idx ON entries (project_id, response_id) WHERE response_id IS NOT NULL;
ALTER TABLE pending ADD COLUMN api TEXT NOT NULL DEFAULT 'openai.chat';
ALTER TABLE call_log ADD COLUMN api TEXT;
