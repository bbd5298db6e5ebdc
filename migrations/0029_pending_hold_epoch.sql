-- Holders counted exactly (issue 49, docs/decisions/0074-heavy-requests-and-holders.md): a request
-- joining a call whose lease lapsed counts its holders from 1 (migration 0027), leaving out any live
-- holder whose process could not renew the lease in time (its database unreachable for a while). The
-- count's epoch says which count a holder is in: a join that starts the count again moves it on, a
-- process's renewal adds back its holders counted in an earlier epoch, and a holder leaving takes its
-- one away only from the count it is in.
ALTER TABLE pending ADD COLUMN hold_epoch INTEGER NOT NULL DEFAULT 0;
