-- A process renews the calls it holds (semula.parking), whichever workspace parked them, and adds back
-- its holders counted in an epoch that is no longer the call's: an owner-run function as
-- semula_hold_among (0024_held_calls_renewal), which touches no more than held_until and holders of the
-- given unguessable ids, and only while they are pending. p_held is a JSON array of
-- [id, epoch, holders] (one per call and epoch its holders here were counted in).
CREATE FUNCTION semula_renew_held(p_held JSONB, p_until DOUBLE PRECISION)
RETURNS TABLE (id TEXT, hold_epoch INTEGER)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public AS $$
    WITH held AS (
        SELECT h->>0 AS id, CAST(h->>1 AS INTEGER) AS epoch, CAST(h->>2 AS INTEGER) AS n
        FROM jsonb_array_elements(p_held) h
    )
    UPDATE pending SET held_until = p_until,
        holders = pending.holders + COALESCE(
            (SELECT SUM(held.n) FROM held WHERE held.id = pending.id AND held.epoch <> pending.hold_epoch), 0)
    WHERE pending.id IN (SELECT held.id FROM held) AND pending.status = 'pending'
    RETURNING pending.id, pending.hold_epoch
$$;
-- One holder fewer, counted in epoch p_epoch: nothing when the count is another epoch's (the holder
-- was not in it); the last one lets the call go (semula_let_go, migration 0027, without the epoch).
CREATE FUNCTION semula_let_go(p_id TEXT, p_now DOUBLE PRECISION, p_epoch INTEGER)
RETURNS INTEGER
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public AS $$
    WITH gone AS (
        UPDATE pending SET holders = GREATEST(holders - 1, 0),
            held_until = CASE WHEN holders <= 1 THEN p_now ELSE held_until END
        WHERE id = p_id AND status = 'pending' AND hold_epoch = p_epoch
        RETURNING 1
    )
    SELECT CAST(COUNT(*) AS INTEGER) FROM gone
$$;
