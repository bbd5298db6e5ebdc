"""The gunicorn worker semula runs: gevent's pywsgi server, with fair turns and the keep-alive rules
of gunicorn's `gevent` worker.

- pywsgi serves a replay hit with about a fifth less CPU than gunicorn's `gevent` worker (bench/RESULTS.md),
  and holds thousands of parked calls just as well.
- Fair turns: a connection whose next request is already waiting would be served again and again
  without ever giving the event loop a turn, starving the worker's other connections for up to a
  second under load (p99 ~900 ms at 50 connections). Yielding once per request bounds that (p99 ~30 ms)
  for some throughput.
- Keep-alive: pywsgi ignores gunicorn's `keepalive`, so an idle client would hold its connection, and a
  graceful stop, for ever. A connection idle for `keepalive` seconds is closed, and so is each one after
  its current request once the worker is stopping.
- Accepted sockets inherit TCP_NODELAY from gunicorn's listening socket (Linux), which a pywsgi server
  needs for small responses.
"""

from __future__ import annotations

from typing import Any

import gevent
from gunicorn.workers.ggevent import GeventPyWSGIWorker, PyWSGIHandler


class Handler(PyWSGIHandler):
    def read_requestline(self) -> str:
        # Only the wait for a request line is bounded: a held call never reads from its socket.
        self.socket.settimeout(self.server.log.cfg.keepalive or None)
        try:
            return super().read_requestline()
        finally:
            if self.socket is not None:
                self.socket.settimeout(None)

    def handle_one_request(self) -> Any:
        result = super().handle_one_request()
        if result is not True:
            return result
        if self.server.closed or not self.server.log.cfg.keepalive:
            return None  # close: the worker is stopping, or keep-alive is off
        gevent.sleep(0)  # a fair turn for the worker's other connections
        return True

    def log_request(self) -> None:
        # gunicorn's handler formats two datetimes per request before its logger drops the entry.
        if self.server.log.access_log_enabled:
            super().log_request()


class Worker(GeventPyWSGIWorker):
    wsgi_handler = Handler
