"""The answerer daemon (ADR-0014): one fresh process per parked call. Not built yet."""
