"""gunicorn settings for semula, loaded by `semula serve` (the one supported way to start it).

gevent workers hold thousands of parked calls. No preload: the gevent worker must
monkey-patch before requests or ssl are imported. graceful_timeout outlasts the longest
record_timeout, so a reload does not cut held calls. Every line gunicorn logs is JSON, as semula's are.
"""

import os
import sys

from semula import logs
from semula.config import MAX_RECORD_TIMEOUT, Settings

if os.environ.get("SEMULA_SERVE") != "1":
    # Started as `gunicorn -c python:semula.gunicorn_conf`: no migration, no shared metrics directory.
    sys.exit("semula: start the server with `semula serve`; it migrates and prepares the metrics first.")

_settings = Settings.from_env()

wsgi_app = "semula.web.wsgi:app"
bind = [_settings.bind]
workers = _settings.workers
# gevent's pywsgi server with fair turns and gunicorn's keep-alive rules (semula/worker.py).
worker_class = "semula.worker.Worker"
worker_connections = _settings.worker_connections
preload_app = False
graceful_timeout = MAX_RECORD_TIMEOUT + 30
timeout = 30
# Idle keep-alive connections hold a graceful stop until they time out: keep it short.
keepalive = _settings.keepalive
# semula writes its own access line per request (semula.web.access); gunicorn's would be a second one.
accesslog = None
errorlog = "-"
loglevel = _settings.log_level
logger_class = "semula.gunicorn_conf.JSONLogger"
proc_name = "semula"
# Several semula servers may run on one machine (and tests start many): no shared control socket.
control_socket_disable = True


def _json_logger() -> type:
    from gunicorn.glogging import Logger

    class JSONLogger(Logger):
        """gunicorn's logger with semula's formatter on its handlers: its lines are semula's too."""

        def setup(self, cfg) -> None:  # noqa: ANN001 - gunicorn's signature
            super().setup(cfg)
            logs.setup(_settings.log_level, _settings.secrets(), _settings.log_format)
            for log in (self.error_log, self.access_log):
                for handler in log.handlers:
                    handler.setFormatter(logs.formatter())

    return JSONLogger


JSONLogger = _json_logger()


def child_exit(server, worker):  # noqa: ANN001 - gunicorn's hook signature
    """A dead worker's live gauges (held calls) must stop counting in /metrics."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


def on_exit(server):  # noqa: ANN001 - gunicorn's hook signature
    """Remove the metrics directory `semula serve` made for this server (never one the operator named)."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory and os.environ.get("SEMULA_METRICS_DIR_MADE") == "1":
        import shutil

        shutil.rmtree(directory, ignore_errors=True)
