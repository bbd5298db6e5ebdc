-- Hosted mode: the flights table is a tenant table like the others (0005_row_level_security).
ALTER TABLE upstream_flights ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON upstream_flights
    USING (workspace_id = current_setting('semula.workspace_id', true))
    WITH CHECK (workspace_id = current_setting('semula.workspace_id', true));

-- Notices that wake waiting calls on every host as soon as what they wait for is committed
-- (docs/decisions/0057-several-hosts.md); each host still polls, so a lost notice costs only time.
-- `semula_resolved`: a parked call was answered or cancelled (payload: its id).
-- `semula_flights`: a record-through flight ended, recorded or failed (payload: project, fingerprint
-- and seq, space-separated). PostgreSQL sends a notice when the writer's transaction commits.
CREATE FUNCTION semula_notify_resolved() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('semula_resolved', NEW.id);
    RETURN NULL;
END
$$;

CREATE TRIGGER pending_resolved AFTER UPDATE OF status ON pending
FOR EACH ROW WHEN (OLD.status = 'pending' AND NEW.status <> 'pending')
EXECUTE FUNCTION semula_notify_resolved();

CREATE FUNCTION semula_notify_flight() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('semula_flights', OLD.project_id || ' ' || OLD.fingerprint || ' ' || OLD.seq);
    RETURN NULL;
END
$$;

CREATE TRIGGER upstream_flight_ended AFTER DELETE ON upstream_flights
FOR EACH ROW EXECUTE FUNCTION semula_notify_flight();

CREATE TRIGGER upstream_flight_failed AFTER UPDATE OF error ON upstream_flights
FOR EACH ROW WHEN (NEW.error IS NOT NULL)
EXECUTE FUNCTION semula_notify_flight();
