-- A process lets go of a call it held (one of its requests ended without an answer), whichever workspace
-- parked it: an owner-run function as semula_hold_among (0024_held_calls_renewal), which touches no more
-- than the holders and held_until of the given unguessable id, and only while it is pending.
CREATE FUNCTION semula_let_go(p_id TEXT, p_now DOUBLE PRECISION)
RETURNS INTEGER
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public AS $$
    WITH gone AS (
        UPDATE pending SET holders = GREATEST(holders - 1, 0),
            held_until = CASE WHEN holders <= 1 THEN p_now ELSE held_until END
        WHERE id = p_id AND status = 'pending'
        RETURNING 1
    )
    SELECT CAST(COUNT(*) AS INTEGER) FROM gone
$$;
