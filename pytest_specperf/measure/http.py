"""The HTTP client of one server: streamed requests in, `RequestRecord`s out, plus control calls.

Engine-neutral: the server's `Engine` (engines/) says which path and body a prompt becomes, which
control paths it has (cache flush, server info, accelerator report), and `measure.streams` reads
the answer. ``sent`` is taken right before the request is written
(docs/metrics.md).

Failures never raise out of `ServerClient.generate`: HTTP errors, timeouts, malformed chunks, a
mid-stream error event, an ``abort`` finish reason and disconnects all become a `RequestRecord`
with ``error`` set (timings seen so far are kept; token counts are left at zero so an error can
never add throughput). The API key is sent as ``Authorization: Bearer`` and scrubbed from every
message this module produces.

The streaming hot path uses `http.client` directly: `requests` with `iter_lines` plus a JSON parse
per event cost about twice the CPU per chunk (33 vs 17 µs on the simulator at 256 tokens), and at
high concurrency the client must not be what limits measured throughput
(``benchmarks/client_overhead.py``). One keep-alive connection per thread; a kept-alive
connection the server already closed is retried once on a fresh one. Control calls
(`flush_cache`, `server_info`, ...) use a short-lived connection of their own.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pytest_specperf.common.redact import redact_url
from pytest_specperf.config.workloads import Prompt, SamplingParams
from pytest_specperf.engines import Engine
from pytest_specperf.engines.base import default_engine
from pytest_specperf.errors import ServerError, StalledServer
from pytest_specperf.measure.records import RequestRecord
from pytest_specperf.measure.streams import ResponseStream, StreamError, short, sse_payloads

_CONTROL_TIMEOUT = 30.0


class _Aborted(Exception):
    """The client was aborted before this request went out: it is not sent."""


class _StaleConnection(Exception):
    """A kept-alive connection the server had already closed; safe to retry once on a new one."""


@dataclass(frozen=True, slots=True)
class _Target:
    scheme: str
    host: str
    port: int
    prefix: str

    @classmethod
    def parse(cls, base_url: str) -> _Target:
        parts = urlsplit(base_url if "://" in base_url else f"http://{base_url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be http(s)://host[:port][/prefix], got {base_url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))

    def connection(self, timeout: float) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout)


class ServerClient:
    """Talks to one server in its engine's terms. Thread-safe: one connection per thread."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        request_timeout: float = 600.0,
        *,
        engine: Engine | None = None,
        model: str | None = None,
    ) -> None:
        if request_timeout <= 0:
            raise ValueError("request_timeout must be > 0")
        self.base_url = base_url.rstrip("/")
        #: the URL as messages show it: credentials and token-like query values hidden
        self.shown_url = redact_url(self.base_url)
        self.request_timeout = request_timeout
        self.engine: Engine = engine or default_engine()  # a running server passes its own
        self.model = model  # OpenAI endpoints of some engines (vLLM) route by model name
        self.last_activity = time.monotonic()  # a request sent or a byte of an answer received
        self._in_flight = 0
        self._aborted = False
        self._sockets: set[socket.socket] = set()
        self._activity = threading.Lock()
        self._target = _Target.parse(base_url)
        self._api_key = api_key or None
        self._headers = {"Content-Type": "application/json", "User-Agent": "pytest-specperf"}
        if self._api_key:
            self._headers["Authorization"] = f"Bearer {self._api_key}"
        self._local = threading.local()

    def __repr__(self) -> str:  # never show the key, even in a debugger or a pytest failure dump
        return f"ServerClient({self.shown_url!r}, api_key={'***' if self._api_key else None})"

    # -- streamed generation ---------------------------------------------------------------

    def generate(self, prompt: Prompt, sampling: SamplingParams, index: int, round_start: float) -> RequestRecord:
        """Send one prompt, stream the answer, and return what was seen; never raises."""
        request = self.engine.request(prompt, sampling, self.model)
        path, body = request.path, json.dumps(request.payload).encode()
        stream = ResponseStream(round_start, request.mode, self.engine)
        with self._tracked():
            return self._generate(index, path, body, stream, round_start)

    def _generate(
        self, index: int, path: str, body: bytes, stream: ResponseStream, round_start: float
    ) -> RequestRecord:
        sent = 0.0
        for attempt in (0, 1):
            sent = time.perf_counter() - round_start
            if self._aborted:
                return stream.failed(index, sent, "not sent: the round was cut short (aborted)")
            try:
                self._stream(path, body, stream, round_start + sent)
                return stream.record(index, sent)
            except _Aborted:
                self._drop_connection()
                return stream.failed(index, sent, "not sent: the round was cut short (aborted)")
            except _StaleConnection:
                self._drop_connection()
                if attempt:
                    return stream.failed(index, sent, "server disconnected before answering")
            except Exception as exc:  # any failure is data about the server, not a crash
                self._drop_connection()
                return stream.failed(index, sent, self._redact(_describe(exc, self.request_timeout)))
        raise AssertionError("unreachable")

    def _stream(self, path: str, body: bytes, stream: ResponseStream, t_sent: float) -> None:
        deadline = t_sent + self.request_timeout
        conn, reused = self._connection()
        try:
            if conn.sock is None:
                conn.connect()
            sock = conn.sock
            if sock is not None:  # a kept-alive socket still has the last request's timeout
                sock.settimeout(self.request_timeout)
                self._watch(sock)  # before the request goes out: an abort from now on cuts it short
            conn.request("POST", self._target.prefix + path, body, self._headers)
            if sock is not None:
                sock.settimeout(max(deadline - time.perf_counter(), 1e-3))
            self.last_activity = time.monotonic()
            resp = conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
            if reused:
                raise _StaleConnection from exc
            raise
        self._local.used = True
        if resp.status != 200:
            detail = short(resp.read(4096).decode("utf-8", "replace"))
            raise StreamError(f"HTTP {resp.status} {resp.reason}: {detail}")
        events = sse_payloads(resp)
        for payload, t in events:
            self.last_activity = time.monotonic()
            if t > deadline:
                raise TimeoutError
            if sock is not None:
                sock.settimeout(max(deadline - t, 1e-3))
            if payload == b"[DONE]":
                stream.end()
                break
            stream.feed_payload(payload, t)
        else:
            return  # the body ended without [DONE]: `ResponseStream.record` reports it
        self._finish_body(resp, events, sock)

    def _finish_body(self, resp: http.client.HTTPResponse, events: Iterator[Any], sock: socket.socket | None) -> None:
        """Read what follows [DONE] (the chunked terminator) so the connection can be kept alive.

        The answer is complete at [DONE]: a server slow to end the body costs the connection, not
        the record.
        """
        try:
            if sock is not None:
                sock.settimeout(1.0)
            for _ in events:
                pass
            resp.close()
        except Exception:
            self._drop_connection()

    # -- progress watch: a server that stops answering is caught by the load driver ---------------

    @contextlib.contextmanager
    def _tracked(self) -> Iterator[None]:
        with self._activity:
            if self._in_flight == 0:
                self.last_activity = time.monotonic()
            self._in_flight += 1
        try:
            yield
        finally:
            with self._activity:
                self._in_flight -= 1
                self._sockets.difference_update(s for s in list(self._sockets) if s.fileno() < 0)

    def _watch(self, sock: socket.socket) -> None:
        """Track an open request's socket, so `abort` can cut it short; refuse one after an abort
        (checked under the same lock as `abort` sets it: no request slips out after it)."""
        with self._activity:
            if self._aborted:
                raise _Aborted
            self._sockets.add(sock)

    def stalled_for(self) -> float:
        """Seconds without a byte from the server while requests are in flight (0 when none are)."""
        with self._activity:
            return time.monotonic() - self.last_activity if self._in_flight else 0.0

    def abort(self) -> None:
        """Cut every open request short and send no more (their records fail): for a server that
        stopped answering, and for a session interrupted while the server is being stopped. A
        request cut short is not retried on a fresh connection."""
        with self._activity:
            self._aborted = True
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._target.connection(self.request_timeout)
            self._local.conn, self._local.used = conn, False
        return conn, self._local.used

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def release_connection(self) -> None:
        """Close the calling thread's pooled connection (worker threads call this when they end)."""
        self._drop_connection()

    # -- control endpoints -----------------------------------------------------------------

    def flush_cache(self, timeout: float = 60.0, stall_timeout: float = 30.0) -> bool:
        """POST the engine's flush path until it answers 200 (SGLang refuses while any request runs).

        Returns False if the server stayed busy for `timeout` seconds; raises `ServerError` for an
        answer that retrying cannot fix (401/403/404) and for any transport failure (refused, reset,
        a broken HTTP answer), naming the URL and the reason, and `StalledServer` when one call gets
        no answer within `stall_timeout` seconds (a hung server). True at once for an engine
        without a flush path.
        """
        path = self.engine.flush_path
        if path is None:
            return True
        deadline = time.monotonic() + timeout
        pause = 0.02
        call_timeout = max(0.1, min(timeout, stall_timeout))
        while True:
            try:
                status, body = self._call("POST", path, timeout=call_timeout)
            except OSError as exc:  # _call turns http.client errors into ConnectionError
                reason = _transport_reason(exc, call_timeout)
                if isinstance(exc, TimeoutError):
                    raise StalledServer(
                        self._redact(
                            f"POST {self.shown_url}{path} failed: {reason} (stall_timeout {stall_timeout:g} s); "
                            "the server made no progress: it is hung (stopped, deadlocked, or a GPU fault)"
                        )
                    ) from None
                raise ServerError(self._redact(f"POST {self.shown_url}{path} failed: {reason}")) from None
            if status == 200:
                return True
            if status in (401, 403, 404):
                raise ServerError(self._redact(f"POST {path}: HTTP {status}: {short(body)}"))
            if time.monotonic() + pause > deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.5)

    def version_info(self, path: str) -> dict[str, Any]:
        """An engine's version endpoint (vLLM's `/version`), as server info with a `version`."""
        return self._json_or_none(path) or {}

    def server_info(self) -> dict[str, Any]:
        """The engine's info answer (resolved server args, version; the first of its paths that
        exists), else its version path's answer, else {} for an engine that has neither."""
        for path in self.engine.info_paths:
            data = self._json_or_none(path)
            if data is not None:
                return data
        if self.engine.info_paths:
            raise ServerError(f"{self.shown_url}: none of {', '.join(self.engine.info_paths)} exists")
        version_path = self.engine.version_path()
        return self.version_info(version_path) if version_path else {}

    def loads(self) -> dict[str, Any] | None:
        """The engine's accelerator report (SGLang's `/v1/loads`); None where it has none."""
        path = self.engine.loads_path
        return self._json_or_none(path) if path else None

    def metrics_text(self, path: str = "/metrics") -> str | None:
        """Prometheus text from `/metrics`; None when the server runs without --enable-metrics."""
        status, body = self._checked_call("GET", path, absent_ok=True)
        return None if status in (404, 405) else body

    def _json_or_none(self, path: str) -> dict[str, Any] | None:
        status, body = self._checked_call("GET", path, absent_ok=True)
        if status in (404, 405):
            return None
        try:
            data = json.loads(body)
        except json.JSONDecodeError:
            raise ServerError(f"GET {path}: answer is not JSON: {short(body, 120)}") from None
        if not isinstance(data, dict):
            raise ServerError(f"GET {path}: expected a JSON object, got {type(data).__name__}")
        return data

    def _checked_call(self, method: str, path: str, *, absent_ok: bool) -> tuple[int, str]:
        try:
            status, body = self._call(method, path, timeout=_CONTROL_TIMEOUT)
        except OSError as exc:
            raise ServerError(self._redact(f"{method} {self.shown_url}{path}: {exc}")) from None
        if status == 200 or (absent_ok and status in (404, 405)):
            return status, body
        raise ServerError(self._redact(f"{method} {path}: HTTP {status}: {short(body)}"))

    def _call(self, method: str, path: str, timeout: float) -> tuple[int, str]:
        """One short request on its own connection (control calls must not disturb streaming ones)."""
        conn = self._target.connection(timeout)
        try:
            conn.request(method, self._target.prefix + path, b"" if method == "POST" else None, self._headers)
            resp = conn.getresponse()
            return resp.status, resp.read(1 << 24).decode("utf-8", "replace")
        except http.client.HTTPException as exc:
            raise ConnectionError(f"bad HTTP answer: {exc!r}") from None
        finally:
            conn.close()

    def _redact(self, text: str) -> str:
        return text.replace(self._api_key, "<redacted>") if self._api_key else text


def _transport_reason(exc: OSError, timeout: float) -> str:
    """Why a control call got no answer: refused, timed out, or the exception's own words."""
    if isinstance(exc, TimeoutError | socket.timeout):
        return f"timeout: no answer within {timeout:g} s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (server not running?)"
    text = short(str(exc), 200)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _describe(exc: BaseException, timeout: float) -> str:
    """A short, stable reason string for a failed request."""
    if isinstance(exc, StreamError):
        return str(exc)
    if isinstance(exc, TimeoutError | socket.timeout):
        return f"timeout: no complete answer within {timeout:g} s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (server not running?)"
    if isinstance(exc, http.client.IncompleteRead | http.client.RemoteDisconnected | ConnectionError):
        return f"server disconnected: {type(exc).__name__}"
    if isinstance(exc, http.client.HTTPException):
        return f"bad HTTP answer: {type(exc).__name__}: {short(str(exc), 120)}"
    return f"{type(exc).__name__}: {short(str(exc), 200)}"
