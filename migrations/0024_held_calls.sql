-- Abandoned calls (issue 49, docs/decisions/0063-abandoned-calls.md): a parked call is held by the
-- processes whose clients wait for it, each renewing `held_until` while it holds. A pending call past
-- its held_until (or with none: parked before this migration, its server since restarted) is one
-- nobody waits for: its client went away, timed out, or the worker holding it was killed. It stays
-- pending and answerable; answering it records the entry and releases nobody.
ALTER TABLE pending ADD COLUMN held_until DOUBLE PRECISION;
