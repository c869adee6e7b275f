"""HTTP front end of the simulator: SGLang's routes on ``http.server`` (HTTP/1.1 keep-alive, SSE streams).

Non-stream answers carry Content-Length; streams use chunked transfer encoding (as uvicorn does), so a
connection stays usable after ``data: [DONE]``. Every handler failure becomes a JSON error response: a bad
body never produces a traceback for the client nor kills the server.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from .cli import SimServerConfig
from .engine import Engine, Request, SimSamplingParams
from .protocol import BadRequest, Job, OpenAIRenderer, generate_chunk, parse_chat, parse_completion, parse_generate
from .status import ServerStatus, loads, metrics_text, model_info, models, server_info
from .text import SimPrompt

log = logging.getLogger("specperf.sim")

HEALTH_CHECK_TIMEOUT_S = 20.0
_MAX_BODY = 64 * 1024 * 1024
_FLUSH_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting "
    "requests, the operation will not be performed.)\n"
)


@dataclass
class ServerState:
    """Mutable server-wide state shared by handler threads."""

    config: SimServerConfig
    engine: Engine
    tuned: bool
    nccl_missing: tuple[str, ...]
    ready: threading.Event = field(default_factory=threading.Event)
    started: float = field(default_factory=time.time)
    startup_time: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _completed: int = 0
    _error_rng: random.Random = field(default_factory=random.Random)
    _warned: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._error_rng.seed(f"errors/{self.config.sim.seed}")

    def status(self) -> ServerStatus:
        return ServerStatus(
            self.config, self.tuned, self.nccl_missing, self.ready.is_set(), self.startup_time, self.engine.snapshot()
        )

    def inject_error(self) -> bool:
        """--sim-error-rate: a seeded share of generation calls fail with HTTP 500."""
        rate = self.config.sim.error_rate
        if rate <= 0:
            return False
        with self._lock:
            return self._error_rng.random() < rate

    def request_completed(self) -> None:
        """Count a finished generation; --sim-exit-after-requests kills the process at the Nth,
        --sim-stop-after-requests stops it (SIGSTOP: alive, holding its connections, answering nothing)."""
        limit = self.config.sim.exit_after_requests
        stop_at = self.config.sim.stop_after_requests
        with self._lock:
            self._completed += 1
            completed = self._completed
        if stop_at is not None and completed == stop_at:
            log.error("no progress from here on (simulated hang: --sim-stop-after-requests %d)", stop_at)
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGSTOP)
        if limit is None or completed < limit:
            return
        log.error(
            "Scheduler hit an exception: RuntimeError: CUDA error: an illegal memory access was "
            "encountered (simulated by --sim-exit-after-requests %d)",
            limit,
        )
        log.error("Received sigquit from a child process. It usually means the child failed.")
        for handler in logging.getLogger("specperf.sim").handlers:
            handler.flush()
        sys.stderr.flush()
        os._exit(1)

    def warn_once(self, key: str, message: str) -> None:
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        log.warning(message)


class SimHTTPServer(ThreadingHTTPServer):
    """A threading server with a deep accept backlog (benchmarks open dozens of connections at once)."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def __init__(self, state: ServerState) -> None:
        self.state = state
        super().__init__((state.config.host, state.config.port), Handler)


class ClientGone(Exception):
    """The client closed the connection; the request is aborted quietly."""


@dataclass(frozen=True)
class Route:
    methods: tuple[str, ...]
    handler: str
    auth: bool = True


ROUTES: dict[str, Route] = {
    "/health": Route(("GET",), "health", auth=False),
    "/health_generate": Route(("GET",), "health", auth=False),
    "/ready": Route(("GET",), "ready", auth=False),
    "/metrics": Route(("GET",), "metrics", auth=False),
    "/model_info": Route(("GET",), "model_info"),
    "/get_model_info": Route(("GET",), "model_info"),
    "/server_info": Route(("GET",), "server_info"),
    "/get_server_info": Route(("GET",), "server_info"),
    "/v1/loads": Route(("GET",), "loads"),
    "/v1/models": Route(("GET",), "models"),
    "/flush_cache": Route(("GET", "POST"), "flush_cache"),
    "/generate": Route(("POST", "PUT"), "generate"),
    "/v1/completions": Route(("POST",), "completions"),
    "/v1/chat/completions": Route(("POST",), "chat"),
}


class Handler(BaseHTTPRequestHandler):
    """Routes one HTTP request; one instance per connection, possibly serving several requests."""

    protocol_version = "HTTP/1.1"
    server_version = "specperf-sim"
    server: SimHTTPServer

    def setup(self) -> None:
        super().setup()
        # Small SSE writes must leave at once: Nagle + delayed ACK would add ~40 ms per chunk.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s - %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    # ---- plumbing ---------------------------------------------------------------------------------
    @property
    def state(self) -> ServerState:
        return self.server.state

    def _dispatch(self, method: str) -> None:
        self._headers_sent = False
        url = urlsplit(self.path)
        self.query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        path = url.path.rstrip("/") or "/"
        try:
            self.body = self._read_body()
            route = ROUTES.get(path)
            if route is None:
                return self._json(404, {"detail": "Not Found"})
            if method not in route.methods:
                return self._json(405, {"detail": "Method Not Allowed"})
            if route.auth and not self._authorized():
                return self._json(401, {"error": "Unauthorized"})
            getattr(self, "h_" + route.handler)()
        except (ClientGone, BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except BadRequest as exc:
            self._json(400, {"error": str(exc)})
            self.close_connection = True
        except Exception as exc:  # a handler bug must not kill the server or leak a traceback
            log.exception("internal error on %s %s", method, path)
            if not self._headers_sent:
                self._json(500, {"error": {"message": f"internal simulator error: {type(exc).__name__}"}})
            self.close_connection = True

    def _read_body(self) -> bytes:
        try:
            return self._read_body_raw()
        except ValueError:
            raise BadRequest("malformed Content-Length or chunked body") from None

    def _read_body_raw(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_BODY:
            raise BadRequest("request body too large")
        return self.rfile.read(length) if length > 0 else b""

    def _authorized(self) -> bool:
        key = self.state.config.api_key
        return key is None or self.headers.get("Authorization") == f"Bearer {key}"

    def _send(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self._headers_sent = True
        self.wfile.write(payload)

    def _json(self, status: int, obj: object) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json")

    def _text(self, status: int, text: str, content_type: str = "text/plain; charset=utf-8") -> None:
        self._send(status, text.encode(), content_type)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._headers_sent = True

    def _event(self, data: str) -> None:
        """One SSE event as one HTTP chunk, written with a single send."""
        payload = f"data: {data}\n\n".encode()
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
        except (BrokenPipeError, ConnectionResetError, OSError) as exc:
            raise ClientGone from exc

    def _end_stream(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, OSError) as exc:
            raise ClientGone from exc

    def _json_body(self) -> object:
        try:
            return json.loads(self.body or b"null")
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadRequest(f"invalid JSON body: {exc}") from None

    # ---- health and status ------------------------------------------------------------------------
    def h_health(self) -> None:
        """503 until warm; then a real 1-token generation through the engine, like SGLang."""
        if not self.state.ready.is_set():
            return self._send(503, b"", "text/plain")
        req = self.state.engine.submit(
            SimPrompt.from_ids([0]),
            SimSamplingParams(max_new_tokens=1, temperature=0.0),
            log_metrics=False,
            rid=f"HEALTH_CHECK_{time.time_ns()}",
        )
        ok = _wait_finished(req, HEALTH_CHECK_TIMEOUT_S)
        if not ok:
            self.state.engine.abort(req)
        self._send(200 if ok else 503, b"", "text/plain")

    def h_ready(self) -> None:
        self._send(200 if self.state.ready.is_set() else 503, b"", "text/plain")

    def h_model_info(self) -> None:
        self._deprecated("/get_model_info", "/model_info")
        self._json(200, model_info(self.state.config))

    def h_server_info(self) -> None:
        self._deprecated("/get_server_info", "/server_info")
        self._json(200, server_info(self.state.status()))

    def _deprecated(self, old: str, new: str) -> None:
        if urlsplit(self.path).path.rstrip("/") == old:
            self.state.warn_once(old, f"The endpoint {old} is deprecated and will be removed; use {new} instead.")

    def h_loads(self) -> None:
        self._json(200, loads(self.state.status()))

    def h_models(self) -> None:
        self._json(200, models(self.state.config, int(self.state.started)))

    def h_metrics(self) -> None:
        if not self.state.config.enable_metrics:
            return self._json(404, {"detail": "Not Found"})
        self._text(200, metrics_text(self.state.status()), "text/plain; version=0.0.4; charset=utf-8")

    def h_flush_cache(self) -> None:
        try:
            timeout = float(self.query.get("timeout", 0))
        except ValueError:
            timeout = -1.0
        if timeout < 0:
            return self._text(400, "timeout must be a number >= 0\n")
        ok = self.state.engine.flush_cache(timeout)
        log.info("Cache flushed successfully!" if ok else "Cache not flushed: there are running or waiting requests")
        self._text(200 if ok else 400, _FLUSH_TEXT)

    # ---- generation -------------------------------------------------------------------------------
    def h_generate(self) -> None:
        self._generation(lambda body: parse_generate(body), self._answer_generate, openai=False)

    def h_completions(self) -> None:
        model = self.state.config.served_model_name
        self._generation(lambda body: parse_completion(body, model), self._answer_openai(chat=False), openai=True)

    def h_chat(self) -> None:
        cfg = self.state.config
        default_max = cfg.profile.server.context_length

        def parse(body: object) -> Job:
            return parse_chat(body, cfg.served_model_name, default_max)

        self._generation(parse, self._answer_openai(chat=True), openai=True)

    def _error(self, status: int, message: str, openai: bool) -> None:
        if openai:
            kind = {400: "BadRequestError", 500: "InternalServerError", 503: "ServiceUnavailableError"}[status]
            return self._json(
                status, {"object": "error", "message": message, "type": kind, "param": None, "code": status}
            )
        self._json(status, {"error": message} if status == 400 else {"error": {"message": message}})

    def _generation(self, parse: Callable[[object], Job], answer: Callable[[Request, Job], None], openai: bool) -> None:
        st = self.state
        if not st.ready.is_set():
            return self._error(503, "The server is not ready yet (still starting up)", openai)
        if st.inject_error():
            return self._error(500, "Internal server error (simulated by --sim-error-rate)", openai)
        try:
            if openai and not self.headers.get("Content-Type", "").startswith("application/json"):
                raise BadRequest("Unsupported Media Type: Only 'application/json' is allowed")
            job = parse(self._json_body())
        except BadRequest as exc:
            return self._error(400, str(exc), openai)
        req = st.engine.submit(job.prompt, job.params, stream=job.stream, rid=job.rid)
        try:
            answer(req, job)
        except ClientGone:
            st.engine.abort(req)
            raise
        st.request_completed()

    def _answer_generate(self, req: Request, job: Job) -> None:
        cfg = self.state.config
        if not job.stream:
            _wait_finished(req)
            return self._json(200, generate_chunk(req, len(req.output_ids), True, cfg.spec, cfg.enable_metrics))
        self._start_stream()
        self._event(json.dumps(generate_chunk(req, 0, False, cfg.spec, cfg.enable_metrics)))  # empty, as SGLang's
        while True:
            ev = req.wait_latest()  # steps published while the last event was written merge into one
            chunk = generate_chunk(req, ev.completion_tokens, ev.finished, cfg.spec, cfg.enable_metrics)
            self._event(json.dumps(chunk))
            if ev.finished:
                break
        self._event("[DONE]")
        self._end_stream()

    def _answer_openai(self, chat: bool) -> Callable[[Request, Job], None]:
        def answer(req: Request, job: Job) -> None:
            r = OpenAIRenderer(req, job, chat, self.state.config.spec)
            if not job.stream:
                _wait_finished(req)
                return self._json(200, r.full())
            self._start_stream()
            if chat:
                self._event(json.dumps(r.first_chat_chunk()))
            while True:
                ev = req.wait_latest()
                for chunk in r.chunks(ev.completion_tokens, ev.finished):
                    self._event(json.dumps(chunk))
                if ev.finished:
                    break
            if job.include_usage:
                self._event(json.dumps(r.usage_chunk()))
            self._event("[DONE]")
            self._end_stream()

        return answer


def _wait_finished(req: Request, timeout: float | None = None) -> bool:
    """Drain a request's events until it finishes; False on timeout."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return False
        try:
            if req.wait(remaining).finished:
                return True
        except Exception:  # queue.Empty
            return False
