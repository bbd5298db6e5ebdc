-- The claim lease (docs/design/product.md §5), second take: claim_next reads unclaimed calls and calls whose lease
-- ran out as two index ranges, so held calls cost nothing however many there are. Unclaimed pending
-- rows are one partial index in id order; leased ones are another, ordered by when the lease ends.
DROP INDEX IF EXISTS pending_claim_idx;
CREATE INDEX pending_unclaimed_idx ON pending (workspace_id, id, project_id)
    WHERE status = 'pending' AND claim_expires_at IS NULL;
CREATE INDEX pending_lease_idx ON pending (workspace_id, claim_expires_at, project_id)
    WHERE status = 'pending' AND claim_expires_at IS NOT NULL;
