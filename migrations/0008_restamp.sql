-- restamp (docs/decisions/0034-faithful-recordings.md): whether a replay gets a fresh id and created
-- (fresh, the default) or the ones recorded (recorded), for tests that assert on them.
ALTER TABLE projects ADD COLUMN restamp TEXT NOT NULL DEFAULT 'fresh';
