-- embeddings (docs/decisions/0035-embeddings.md): off (a missed embeddings call is parked like any
-- other) or synthetic (answered at once with deterministic vectors, saved as an entry).
ALTER TABLE projects ADD COLUMN embeddings TEXT NOT NULL DEFAULT 'off';
