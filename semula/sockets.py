"""What a connection holds, looked at without waiting and without reading: one non-blocking peek."""

from __future__ import annotations

import socket
from typing import Any


def unread(sock: Any) -> bool | None:
    """True when the peer sent bytes not read yet, False when nothing has come, None when the peer
    closed its side or the connection failed. Works on gevent's sockets and the standard library's."""
    timeout = sock.gettimeout()
    sock.settimeout(0.0)
    try:
        return True if sock.recv(1, socket.MSG_PEEK) else None
    except BlockingIOError:
        return False
    except OSError:
        return None
    finally:
        sock.settimeout(timeout)
