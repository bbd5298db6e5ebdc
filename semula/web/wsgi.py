"""The WSGI entry point gunicorn loads in each worker (never preloaded: gevent must patch first)."""

from semula import logs
from semula.config import Settings
from semula.service import retention
from semula.web import create_app

settings = Settings.from_env()
logs.setup(settings.log_level, settings.secrets())
app = create_app(settings)
app.extensions["semula"]["calllog"].start()
# Call-log retention: every worker prunes hourly in small batches (docs/retention.md).
retention.start_pruner(app.extensions["semula"]["store"], settings.log_retention_days)
