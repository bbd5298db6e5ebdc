-- A process renews the calls it holds, of every workspace, in one statement: an owner-run function
-- as semula_resolved_among (0005_row_level_security), which touches no more than held_until of the
-- given unguessable ids, and only while they are pending.
CREATE FUNCTION semula_hold_among(p_ids JSONB, p_until DOUBLE PRECISION)
RETURNS INTEGER
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public AS $$
    WITH held AS (
        UPDATE pending SET held_until = p_until
        WHERE id IN (SELECT jsonb_array_elements_text(p_ids)) AND status = 'pending'
        RETURNING 1
    )
    SELECT CAST(COUNT(*) AS INTEGER) FROM held
$$;
