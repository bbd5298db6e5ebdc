-- The calls resolved since a time, whichever workspace parked them: an owner-run function as
-- semula_resolved_among (0005_row_level_security), since one process holds calls of every workspace.
-- It gives no more than semula_resolved_among gives of a call (its id, status, entry and time), and a
-- holder keeps only the ids it parked itself.
CREATE FUNCTION semula_resolved_since(p_since DOUBLE PRECISION)
RETURNS TABLE (id TEXT, status TEXT, entry_id TEXT, resolved_at DOUBLE PRECISION)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS $$
    SELECT pd.id, pd.status, pd.entry_id, pd.resolved_at FROM pending pd
    WHERE pd.resolved_at >= p_since AND pd.status <> 'pending'
$$;
