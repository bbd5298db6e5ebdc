-- A replay miss names the closest of the newest entries of its API, its model's first
-- (semula.service.replay): read through these in order, :limit rows at most, where a sort of every
-- entry of the project took 48 ms at 10,000 entries on PostgreSQL
-- (docs/decisions/0040-replay-change-counter.md).
CREATE INDEX entries_candidates_idx ON entries (project_id, api, model, id);
CREATE INDEX entries_api_idx ON entries (project_id, api, id);
