-- A call-log row no longer names its workspace through a foreign key (docs/decisions/0048-call-log-rows.md).
-- The key's check ran once per row, as a query that also took a share lock on the workspace's row:
-- a quarter of the database's work for a replay hit's row, and with several workers flushing at once
-- the lock became a multixact. The server stamps each row with its caller's workspace, which exists
-- while the call runs, and no workspace is ever deleted; row-level security still binds a row to its
-- tenant.
ALTER TABLE call_log DROP CONSTRAINT call_log_workspace_id_fkey;
