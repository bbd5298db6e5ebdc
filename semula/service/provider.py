"""The provider's side of record-through: HTTP to the operator's provider, read whole or as a stream.

Transport only (the budget, single flight and what is saved are semula/service/record_through.py). The key
goes into the Authorization header and nowhere else; the app's headers are never copied. A
provider's error text is shown only after redaction, and an unreachable provider is named by
exception type only (its text names the URL, which may carry a credential).
"""

from __future__ import annotations

import functools
import http.client
import json
import select
import ssl
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import certifi

from semula import dialects
from semula.core import redact
from semula.core.errors import UpstreamError
from semula.dialects import Dialect

if TYPE_CHECKING:
    import urllib3

MAX_RESPONSE_BYTES = 16 * 1024 * 1024
ERROR_TEXT_CHARS = 300
KEPT_CONNECTIONS = 32  # idle keep-alive connections to the provider a process keeps; more may be open


def transport_errors() -> tuple[type[BaseException], ...]:
    """What a failed transport raises: http.client's errors, OSError and ValueError, and urllib3's once
    it is imported (only a proxy uses it: a start does not import it, decision 0062). Read in an
    `except` clause, which is evaluated only when something was raised."""
    known: tuple[type[BaseException], ...] = (http.client.HTTPException, OSError, ValueError)
    urllib3_errors = sys.modules.get("urllib3.exceptions")
    return known if urllib3_errors is None else (*known, urllib3_errors.HTTPError)


class NotSent(Exception):
    """The connection to the provider failed before the request left: nothing was spent."""


def _ca_bundle() -> str:
    """The CA certificates a provider's TLS certificate is checked against (requests used the same)."""
    return certifi.where()


def _read_capped(response: http.client.HTTPResponse | urllib3.BaseHTTPResponse) -> bytes:
    parts, size = [], 0
    for part in iter(lambda: response.read(65536), b""):
        size += len(part)
        if size > MAX_RESPONSE_BYTES:
            raise UpstreamError("The upstream provider's answer is too large.")
        parts.append(part)
    return b"".join(parts)


class _Direct:
    """Keep-alive connections straight to the provider, one caller on each at a time.

    The standard library's http.client rather than urllib3 or requests: a call costs 0.49 ms here
    against 0.75 through urllib3's pool and 1.98 through requests (sequential, in a gevent process),
    and a forward needs none of what they add: it never retries (a POST the provider may have
    answered would count twice) nor follows redirects. TLS is verified, host name included.
    """

    def __init__(self, endpoint: str):
        parts = urllib.parse.urlsplit(endpoint)
        self.path = parts.path + (f"?{parts.query}" if parts.query else "")
        self._connect: Callable[[float], http.client.HTTPConnection]
        if parts.scheme == "https":
            context = ssl.create_default_context(cafile=_ca_bundle())
            self._connect = lambda timeout: http.client.HTTPSConnection(
                parts.hostname or "", parts.port, timeout=timeout, context=context
            )
        else:
            self._connect = lambda timeout: http.client.HTTPConnection(
                parts.hostname or "", parts.port, timeout=timeout
            )
        self._idle: list[http.client.HTTPConnection] = []

    def post(self, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, bytes, dict[str, str]]:
        status, response, done = self.open(body, headers, timeout)
        try:
            raw = _read_capped(response)
        except BaseException:
            done(False)  # whatever it holds unread must not reach the next call
            raise
        done(True)
        return status, raw, response_headers(response)

    def open(
        self, body: bytes, headers: dict[str, str], timeout: float
    ) -> tuple[int, http.client.HTTPResponse, Callable[[bool], None]]:
        """Send the request; the status, the response to read, and `done(read_whole)` to call after."""
        conn = self._take(timeout)
        if conn.sock is None:
            try:
                conn.connect()
            except BaseException as exc:
                conn.close()
                raise NotSent(type(exc).__name__) from exc
        try:
            conn.request("POST", self.path, body=body, headers=headers)
            response = conn.getresponse()
        except BaseException:
            conn.close()
            raise

        def done(read_whole: bool) -> None:
            if read_whole and not response.isclosed():
                # Python 3.11's read1() leaves a response sized by Content-Length open at its end (a
                # stream): read() closes it, or the connection's next request is ResponseNotReady.
                response.read()
            if read_whole and not response.will_close and len(self._idle) < KEPT_CONNECTIONS:
                self._idle.append(conn)
            else:
                conn.close()

        return response.status, response, done

    def _take(self, timeout: float) -> http.client.HTTPConnection:
        while self._idle:
            conn = self._idle.pop()
            if conn.sock is not None and not select.select([conn.sock], [], [], 0)[0]:
                conn.sock.settimeout(timeout)  # idle and nothing to read: the provider kept it open
                return conn
            conn.close()  # closed by the provider meanwhile (or it sent something unasked)
        return self._connect(timeout)


class _Proxied:
    """Through the environment's proxy: urllib3's ProxyManager (a CONNECT tunnel for HTTPS)."""

    def __init__(self, endpoint: str, proxy: str):
        import urllib3  # here, not with the module: only a proxy needs it

        self.endpoint = endpoint
        parts = urllib.parse.urlsplit(proxy)
        headers = {}
        if parts.username is not None:  # http://user:password@proxy:3128, as requests took it
            credentials = (
                f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            )
            headers = urllib3.make_headers(proxy_basic_auth=credentials)
            proxy = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
        self._manager = urllib3.ProxyManager(
            proxy, proxy_headers=headers, maxsize=KEPT_CONNECTIONS, ca_certs=_ca_bundle()
        )

    def post(self, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, bytes, dict[str, str]]:
        status, response, done = self.open(body, headers, timeout)
        try:
            raw = _read_capped(response)
        except BaseException:
            done(False)
            raise
        done(True)
        return status, raw, response_headers(response)

    def open(
        self, body: bytes, headers: dict[str, str], timeout: float
    ) -> tuple[int, urllib3.BaseHTTPResponse, Callable[[bool], None]]:
        from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

        try:
            response = self._manager.urlopen(
                "POST",
                self.endpoint,
                body=body,
                headers=headers,
                timeout=timeout,
                retries=False,
                redirect=False,
                preload_content=False,
            )
        except (NewConnectionError, ConnectTimeoutError) as exc:  # before the request's first byte
            raise NotSent(type(exc).__name__) from exc

        def done(read_whole: bool) -> None:
            if not read_whole:
                response.close()
            response.release_conn()

        return response.status, response, done


@functools.lru_cache(maxsize=16)
def _provider(url: str, path: str = "/chat/completions") -> _Direct | _Proxied:
    """How to reach the provider's `path` at `url`: HTTPS_PROXY, HTTP_PROXY and NO_PROXY are read once
    per endpoint, at its first forward (requests read them again for every call)."""
    endpoint = url + path
    parts = urllib.parse.urlsplit(endpoint)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(parts.hostname or ""):
        return _Proxied(endpoint, proxy)
    return _Direct(endpoint)


def response_headers(response: Any) -> dict[str, str]:
    """A provider response's headers, names lowercased (http.client's and urllib3's alike)."""
    return {name.lower(): value for name, value in response.headers.items()}


def _unreachable(exc: BaseException, *, sent: bool) -> UpstreamError:
    # By exception type only: its text names the URL, which may carry a credential.
    name = str(exc) if isinstance(exc, NotSent) else type(exc).__name__
    error = UpstreamError(
        f"The upstream provider is unreachable ({name}).", code="semula_upstream_unreachable"
    )
    error.sent = sent
    return error


def _request(
    settings: Any, body: dict[str, Any], model: str | None, dialect: Dialect
) -> tuple[str, bytes, dict[str, str]]:
    """The provider's base URL for this API, the JSON to send and the headers (its key, never the app's)."""
    payload = dialect.upstream_body(dict(body))
    if model and dialect.upstream_model_applies:
        payload["model"] = model
    url, key = dialect.upstream(settings)
    return url, json.dumps(payload).encode(), dialect.upstream_headers(key or "", body)


def call_provider(
    settings: Any, body: dict[str, Any], model: str | None, dialect: Dialect | None = None
) -> tuple[dict[str, Any], Any, dict[str, str]]:
    """POST the app's own JSON to the provider's endpoint for its API; a stream is read whole (for
    Chat Completions with usage forced on), with the response's headers. An UpstreamError says whether
    the request left (`sent`)."""
    dialect = dialect or dialects.get(dialects.CHAT)
    url, data, headers = _request(settings, body, model, dialect)
    try:
        status, raw, received = _provider(url, dialect.upstream_target(body)).post(
            data, headers, settings.upstream_timeout
        )
    except NotSent as exc:
        raise _unreachable(exc, sent=False) from None
    except transport_errors() as exc:
        raise _unreachable(exc, sent=True) from None
    if status != 200:
        shown = redact.provider_error_text(status, raw, settings.secrets(), limit=ERROR_TEXT_CHARS)
        raise UpstreamError(f"The upstream provider answered {shown}")
    try:
        if body.get("stream") is True:
            return (*dialect.from_stream(_parse_sse(raw)), received)
        return json.loads(raw), None, received
    except ValueError:
        raise UpstreamError("The upstream provider's answer is not valid JSON.") from None


class Stream:
    """A provider's stream as it arrives: server-sent event blocks, read once, capped in size."""

    def __init__(self, response: Any, done: Callable[[bool], None]):
        self._response = response
        self._done = done
        self._closed = False
        self.headers = response_headers(response)
        self.gaps: list[float] = []  # seconds between one event and the next, as they arrived

    def blocks(self) -> Iterator[bytes]:
        """Each event block (the lines between blank lines) as it arrives, without the blank line."""
        buffer, size, last = b"", 0, None
        while True:
            part = self._response.read1(65536)
            if not part:
                break
            size += len(part)
            if size > MAX_RESPONSE_BYTES:
                raise UpstreamError("The upstream provider's answer is too large.")
            buffer += part.replace(b"\r\n", b"\n")
            arrived = time.monotonic()
            while b"\n\n" in buffer:
                block, buffer = buffer.split(b"\n\n", 1)
                if block.strip():
                    if last is not None:
                        self.gaps.append(round(arrived - last, 4))
                    last = arrived
                    yield block
        if buffer.strip():
            yield buffer

    def close(self, read_whole: bool) -> None:
        if not self._closed:
            self._closed = True
            self._done(read_whole)


def open_stream(settings: Any, body: dict[str, Any], model: str | None, dialect: Dialect) -> Stream:
    """Send a stream request; its events are read as they arrive (errors as call_provider's)."""
    url, data, headers = _request(settings, body, model, dialect)
    try:
        status, response, done = _provider(url, dialect.upstream_target(body)).open(
            data, headers, settings.upstream_timeout
        )
    except NotSent as exc:
        raise _unreachable(exc, sent=False) from None
    except transport_errors() as exc:
        raise _unreachable(exc, sent=True) from None
    if status != 200:
        try:
            raw = _read_capped(response)
        finally:
            done(False)
        shown = redact.provider_error_text(status, raw, settings.secrets(), limit=ERROR_TEXT_CHARS)
        raise UpstreamError(f"The upstream provider answered {shown}")
    return Stream(response, done)


def event_data(block: bytes) -> Any:
    """The JSON of an event block's `data:` lines; None for `[DONE]` and blocks without data."""
    lines = [line[5:].strip() for line in block.decode("utf-8").split("\n") if line.startswith("data:")]
    if not lines or lines == ["[DONE]"]:
        return None
    return json.loads("\n".join(lines))


def _parse_sse(raw: bytes) -> list[dict[str, Any]]:
    chunks = []
    for line in raw.decode("utf-8").splitlines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        chunks.append(json.loads(data))
    if not chunks:
        raise ValueError("empty stream")
    return chunks
