-- How many calls each project has parked (issue 52, docs/decisions/0080-held-calls-at-scale.md): a miss
-- parks only while its project has fewer than max_misses, and counting the pending rows at each park made
-- parking N calls cost N²/2 index entries (a count over 50,000 rows took 15-85 ms here). Kept by triggers
-- (0028_pending_parked_triggers.*), which count the calls parked before them in the same transaction; the
-- sum of a project's rows is its count. A deleted project's rows go with it.
CREATE TABLE pending_parked (
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    shard INTEGER NOT NULL,
    workspace_id TEXT NOT NULL REFERENCES workspaces (id),
    parked INTEGER NOT NULL,
    PRIMARY KEY (project_id, shard)
);
