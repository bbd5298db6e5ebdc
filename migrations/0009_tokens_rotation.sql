-- Token rotation (docs/operations.md): when each token was last used (written at most once a minute
-- per token and process, so a busy token costs no write per request) and an optional expiry.
ALTER TABLE tokens ADD COLUMN last_used_at DOUBLE PRECISION;
ALTER TABLE tokens ADD COLUMN expires_at DOUBLE PRECISION;
