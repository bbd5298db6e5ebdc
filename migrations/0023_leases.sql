-- Leases that make one process of the deployment do a thing for all of them
-- (docs/decisions/0057-several-hosts.md): `metrics`, the host whose /metrics serves the gauges read
-- from the database, so that N hosts on one database do not export them N times. A holder renews its
-- lease while it works; once it lapses, the next process that asks takes it.
CREATE TABLE leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
);
