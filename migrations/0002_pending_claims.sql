-- The claim lease (docs/design/product.md §5): claim_next looks for the oldest pending call whose lease is absent or
-- expired. This partial index holds only pending rows, in id order, with what the candidate query
-- filters on, so finding the next claimable call reads the index alone, whatever the history size.
CREATE INDEX pending_claim_idx ON pending (workspace_id, id, project_id, claim_expires_at)
    WHERE status = 'pending';
