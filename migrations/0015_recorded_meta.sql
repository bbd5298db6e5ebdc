-- Faithful recordings (docs/decisions/0034-faithful-recordings.md): what a provider sent besides the
-- body, kept with the entry as JSON: response headers from an allowlist and the gaps between the
-- events of a recorded stream. stream_pacing replays those gaps (none, recorded, or a factor).
ALTER TABLE entries ADD COLUMN meta TEXT;
ALTER TABLE projects ADD COLUMN stream_pacing TEXT NOT NULL DEFAULT 'none';
