"""The WSGI entry point gunicorn loads in each worker (never preloaded: gevent must patch first)."""

import gevent

from semula import logs
from semula.config import Settings
from semula.service import retention
from semula.web import create_app

settings = Settings.from_env()
logs.setup(settings.log_level, settings.secrets())
app = create_app(settings)
store = app.extensions["semula"]["store"]
# Call-log rows are written every 0.1 s. SQLite's calls hold the whole process, so its writes (and the
# WAL checkpoints they trigger, with an fsync) run in one of gevent's native threads instead.
app.extensions["semula"]["calllog"].start(
    interval=0.1, offload=gevent.get_hub().threadpool.apply if store.blocks_process else None
)
# A bundle import parses and checks for seconds of CPU: in a native thread, the event loop keeps
# serving this worker's other requests meanwhile (Python switches threads every few milliseconds).
app.extensions["semula"]["offload"] = gevent.get_hub().threadpool.apply
# Retention of the call log and of session counters: every worker prunes hourly in small batches
# (docs/retention.md).
retention.start_pruner(store, settings.log_retention_days, session_days=settings.session_retention_days)
