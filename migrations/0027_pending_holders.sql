-- Calls held by several processes (issue 49, docs/decisions/0074-heavy-requests-and-holders.md): how many
-- requests hold a pending call, across every process and host. A request parking or joining the call adds
-- one; one that ends without an answer (its client went away, its record_timeout passed) takes one away,
-- and the last one lets the call go (held_until = now: abandoned at once). A holder killed without
-- taking its one away leaves the count high: the call is then abandoned when the lease (held_until,
-- migration 0024), which only live holders renew, lapses; a request joining a call whose lease lapsed
-- counts from 1 again.
ALTER TABLE pending ADD COLUMN holders INTEGER NOT NULL DEFAULT 0;
