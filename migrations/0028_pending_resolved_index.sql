-- Held calls polled by time (issue 52, docs/decisions/0080-held-calls-at-scale.md): a process holding many
-- calls asks which calls were resolved since its last look, whatever their number, rather than asking
-- after each of them by id; this index keeps that look to the calls resolved meanwhile. Pending rows have
-- no resolved_at.
CREATE INDEX pending_resolved_idx ON pending (resolved_at);
