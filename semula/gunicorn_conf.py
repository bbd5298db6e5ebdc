"""gunicorn settings for semula; deploy/gunicorn.conf.py imports this module.

gevent workers hold thousands of parked calls. No preload: the gevent worker must
monkey-patch before requests or ssl are imported. graceful_timeout outlasts the longest
record_timeout, so a reload does not cut held calls.
"""

from semula.config import MAX_RECORD_TIMEOUT, Settings

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
accesslog = None
errorlog = "-"
loglevel = _settings.log_level
proc_name = "semula"
# Several semula servers may run on one machine (and tests start many): no shared control socket.
control_socket_disable = True


def child_exit(server, worker):  # noqa: ANN001 - gunicorn's hook signature
    """A dead worker's live gauges (held calls) must stop counting in /metrics."""
    import os

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
