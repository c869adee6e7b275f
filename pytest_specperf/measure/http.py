"""SGLang HTTP client and load driver: streamed requests in, `RequestRecord`s out.

Endpoints (sglang 0.5.23, see docs/engines/sglang.md):

- Text prompts go to ``POST /generate`` with ``{"text", "sampling_params", "stream": true}``. Each SSE
  event ``data: {json}`` carries the *cumulative* ``text`` (SGLang's default; a server started with
  ``--incremental-streaming-output`` sends deltas, and then only `output_hash` is affected) and a
  ``meta_info``; the final one has ``finish_reason`` and, with speculation, ``spec_verify_ct``,
  ``spec_num_correct_drafts``, ``spec_num_proposed_drafts``. Every event is one chunk.
- Message prompts go to ``POST /v1/chat/completions`` with ``stream_options.include_usage`` and
  ``return_spec_tokens_details: true``, so the server applies the model's chat template (what
  production traffic and the draft model's training data look like). SGLang streams, in order: a
  role chunk with empty content, content-delta chunks (empty deltas are never sent), a chunk whose
  choice has ``finish_reason``, then response-level chunks with ``choices: []``: one with
  ``sglext.spec_tokens_details`` (mirrors the ``meta_info`` ``spec_*`` keys) and one with ``usage``
  (``completion_tokens``; ``prompt_tokens_details.cached_tokens`` only with
  ``--enable-cache-report``), then ``[DONE]`` (serving_chat.py). The parser accepts these fields on
  any chunk, so a server that folds them into the last content chunk works too. Only content-delta
  chunks count as chunks (the role/finish/usage chunks carry no tokens and would add fake
  near-zero gaps); the finish chunk's arrival still ends E2E, because it marks the final step.
- No ``model`` key is sent: SGLang serves one model and defaults the field.

Definitions (docs/metrics.md): ``sent`` is taken right before the request is written; ``first_chunk`` is
the first chunk with non-empty text; ``chunk_gaps`` are the gaps between consecutive chunks, so there
are ``num_chunks - 1``; all are ``time.perf_counter()`` seconds relative to the round start.

Failures never raise out of `SGLangClient.generate`: HTTP errors, timeouts, malformed chunks, a
mid-stream ``data: {"error": ...}`` event, an ``abort`` finish reason and disconnects all become a
`RequestRecord` with ``error`` set (timings seen so far are kept; token counts are left at zero so an
error can never add throughput). The API key is sent as ``Authorization: Bearer`` and scrubbed from
every message this module produces.

The streaming hot path uses `http.client` directly with its own chunked-transfer decoder: `requests`
with `iter_lines` plus a JSON parse per event cost about twice the CPU per chunk (33 vs 17 µs on the
simulator at 256 tokens), and at high concurrency the client must not be what limits
measured throughput (see ``benchmarks/client_overhead.py``). ``/generate`` events after the first
non-empty one are only framed, not JSON-parsed: their cumulative ``text`` and ``output_ids`` would
make parsing all of them quadratic in the output length; the last one (final ``meta_info``) is parsed
at ``[DONE]``. One keep-alive connection per thread; a kept-alive connection the server already
closed is retried once on a fresh one.

Control calls (`flush_cache`, `server_info`, ...) use a short-lived connection of their own.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import queue
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload
from urllib.parse import urlsplit

from pytest_specperf.config.workloads import Prompt, WorkloadConfig
from pytest_specperf.engines.base import Engine, SpecCounts, StreamMode
from pytest_specperf.engines.sglang import SGLang
from pytest_specperf.errors import ServerError, StalledServer
from pytest_specperf.measure.records import RequestRecord

_MAX_LINE = 1 << 24  # an SSE event with 16 MiB of cumulative text is past anything sane
_ERROR_BODY_CHARS = 300
_CONTROL_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Sampling params of a workload; `to_sglang` gives exactly SGLang's `sampling_params` keys.

    Real SGLang answers HTTP 400 to any unknown key inside `sampling_params`, so nothing else is sent.
    `sampling_seed` seeds the server's sampler so a run at temperature > 0 draws the same tokens again
    (docs/engines/sglang.md lists it among the allowed keys). It is sent only when set and the
    temperature is above 0: greedy decoding draws nothing, so a seed there would only add a key.
    """

    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    ignore_eos: bool = False
    sampling_seed: int | None = None

    @classmethod
    def from_workload(cls, cfg: WorkloadConfig) -> SamplingParams:
        """The workload's params; its `seed` also seeds sampling when it samples (temperature > 0)."""
        seed = cfg.seed if cfg.temperature > 0 else None
        return cls(cfg.max_new_tokens, cfg.temperature, cfg.top_p, cfg.ignore_eos, seed)

    @property
    def _seed(self) -> int | None:
        return self.sampling_seed if self.temperature > 0 else None

    def to_sglang(self) -> dict[str, Any]:
        """The `/generate` `sampling_params` object."""
        params: dict[str, Any] = {
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "ignore_eos": self.ignore_eos,
        }
        if self._seed is not None:
            params["sampling_seed"] = self._seed
        return params

    def to_openai(self) -> dict[str, Any]:
        """The same params as OpenAI chat fields (`ignore_eos` is an SGLang extension there).

        The seed goes in OpenAI's own `seed` field. docs/engines/sglang.md does not list it, but
        SGLang's `ChatCompletionRequest` declares `seed: Optional[int]` and `to_sampling_params`
        forwards it as `sampling_seed` (srt/entrypoints/openai/protocol.py), so it is the same seed.
        """
        params: dict[str, Any] = {
            "max_tokens": self.max_new_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "ignore_eos": self.ignore_eos,
        }
        if self._seed is not None:
            params["seed"] = self._seed
        return params


class _StreamError(Exception):
    """A reason a streamed request failed; its message becomes `RequestRecord.error`."""


class _StaleConnection(Exception):
    """A kept-alive connection the server had already closed; safe to retry once on a new one."""


# ----------------------------------------------------------------------------------------------
# stream parsing


class _Stream:
    """Timings and server-reported fields of one streamed response while it is being read."""

    __slots__ = (
        "cached_tokens",
        "chat",
        "completion_tokens",
        "done",
        "engine",
        "finish_reason",
        "first",
        "gaps",
        "last",
        "mode",
        "num_chunks",
        "pending",
        "pieces",
        "prompt_tokens",
        "spec",
        "start",
        "text",
    )

    def __init__(self, round_start: float, mode: StreamMode, engine: Engine) -> None:
        self.start = round_start
        self.mode = mode
        self.engine = engine
        self.chat = mode != "generate"  # OpenAI-style events (chat or text completions)
        self.first: float | None = None
        self.last: float | None = None
        self.num_chunks = 0
        self.gaps: list[float] = []
        self.text = ""
        self.pieces: list[str] = []
        self.done = False
        self.pending: bytes | None = None
        self.finish_reason: Any = None
        self.prompt_tokens: Any = None
        self.completion_tokens: Any = None
        self.cached_tokens: Any = None
        self.spec: SpecCounts | None = None

    def chunk(self, t: float, has_text: bool) -> None:
        """Count one token-carrying chunk arriving at perf_counter time `t`."""
        t -= self.start
        if self.last is not None:
            self.gaps.append(t - self.last)
        self.last = t
        self.num_chunks += 1
        if has_text and self.first is None:
            self.first = t

    def feed_payload(self, payload: bytes, t: float) -> None:
        """One `data:` payload. /generate chunks after the first text are only framed, not parsed.

        Their text and output_ids are cumulative, so parsing every one costs O(n^2) in the output
        length; only the last (final meta_info) is needed. A cheap check still catches SGLang's
        error events and non-object garbage at once; anything subtler is caught when the last
        payload is parsed at [DONE] (SGLang's mid-stream error is always the last event).
        """
        if self.chat or self.first is None or payload.startswith(b'{"error"'):
            self.feed(_loads(payload), t)
        elif payload[:1] == b"{" and payload[-1:] == b"}":
            self.chunk(t, True)
            self.pending = payload
        else:
            raise _StreamError(f"malformed chunk (not a JSON object): {_short(payload.decode('utf-8', 'replace'), 80)}")

    def end(self) -> None:
        """[DONE] arrived: read the final fields from the last payload that was only framed."""
        self.done = True
        if self.pending is not None:
            self.feed(_loads(self.pending), self.last or 0.0, count=False)
            self.pending = None

    def feed(self, obj: Any, t: float, count: bool = True) -> None:
        if not isinstance(obj, dict):
            raise _StreamError(f"malformed chunk: expected a JSON object, got {type(obj).__name__}")
        if "error" in obj or obj.get("object") == "error":
            raise _StreamError(f"server error mid-stream: {_error_text(obj)}")
        if self.chat:
            self._feed_chat(obj, t)
        else:
            self._feed_generate(obj, t, count)

    def _feed_generate(self, obj: dict[str, Any], t: float, count: bool) -> None:
        meta, text = obj.get("meta_info"), obj.get("text")
        if not isinstance(meta, dict) or not isinstance(text, str):
            raise _StreamError("malformed chunk: /generate event without 'text' and 'meta_info'")
        if count:
            self.chunk(t, bool(text))
        self.text = text
        self.finish_reason = meta.get("finish_reason")
        self.prompt_tokens = meta.get("prompt_tokens")
        self.completion_tokens = meta.get("completion_tokens")
        self.cached_tokens = meta.get("cached_tokens")
        self.spec = self.engine.spec_counts(obj, self.mode) or self.spec

    def _feed_chat(self, obj: dict[str, Any], t: float) -> None:
        choices = obj.get("choices")
        if choices is None:
            choices = []
        if not isinstance(choices, list):
            raise _StreamError("malformed chunk: 'choices' is not a list")
        for choice in choices:
            self._feed_choice(choice, t)
        usage = obj.get("usage")
        if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
            self.prompt_tokens = usage.get("prompt_tokens")
            self.completion_tokens = usage.get("completion_tokens")
            details = usage.get("prompt_tokens_details")
            self.cached_tokens = details.get("cached_tokens") if isinstance(details, dict) else None
        self.spec = self.engine.spec_counts(obj, self.mode) or self.spec

    def _feed_choice(self, choice: Any, t: float) -> None:
        if not isinstance(choice, dict):
            raise _StreamError("malformed chunk: a choice is not an object")
        delta = choice.get("delta") or {}
        text = choice.get("text") if self.mode == "completions" else None  # text completions: no delta
        piece = (delta.get("reasoning_content") or "") + (delta.get("content") or "") + (text or "")
        if piece:
            self.chunk(t, True)
            self.pieces.append(piece)
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
            self.last = max(self.last or 0.0, t - self.start)

    def record(self, index: int, sent: float) -> RequestRecord:
        """The finished record; raises `_StreamError` if the stream did not end properly."""
        if not self.done:
            raise _StreamError("stream ended before [DONE] (server disconnected)")
        if self.num_chunks == 0:
            raise _StreamError("stream ended without any output chunk")
        reason = _finish_type(self.finish_reason)
        if reason is None:
            raise _StreamError("stream ended without a finish_reason")
        if reason == "abort":
            raise _StreamError(f"request aborted by the server: {_short(json.dumps(self.finish_reason))}")
        completion = self.completion_tokens
        if isinstance(completion, bool) or not isinstance(completion, int):
            where = "usage" if self.chat else "meta_info"
            raise _StreamError(f"final {where} has no integer completion_tokens")
        text = "".join(self.pieces) if self.chat else self.text
        spec = self.spec
        return RequestRecord(
            index=index,
            sent=sent,
            first_chunk=self.first,
            last_chunk=self.last,
            num_chunks=self.num_chunks,
            prompt_tokens=_int_or(self.prompt_tokens, 0),
            completion_tokens=completion,
            cached_tokens=_int_or(self.cached_tokens, 0),
            verify_ct=spec.verify_steps if spec else None,
            accepted_drafts=spec.accepted_drafts if spec else None,
            proposed_drafts=spec.proposed_drafts if spec else None,
            spec_tokens=spec.spec_tokens if spec else None,
            finish_reason=reason,
            output_hash=hashlib.sha256(text.encode("utf-8")).hexdigest(),
            output=text,
            chunk_gaps=tuple(self.gaps),
        )

    def failed(self, index: int, sent: float, reason: str) -> RequestRecord:
        return RequestRecord(
            index=index,
            sent=sent,
            first_chunk=self.first,
            last_chunk=self.last,
            num_chunks=self.num_chunks,
            error=reason,
            chunk_gaps=tuple(self.gaps),
        )


def _finish_type(reason: Any) -> str | None:
    """SGLang's native finish_reason is {"type": ..., ...}; OpenAI's is the bare type string."""
    if isinstance(reason, dict):
        kind = reason.get("type")
        return str(kind) if kind else None
    return str(reason) if reason else None


@overload
def _int_or(value: Any, default: int) -> int: ...
@overload
def _int_or(value: Any, default: None) -> int | None: ...
def _int_or(value: Any, default: int | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _error_text(obj: dict[str, Any]) -> str:
    error = obj.get("error", obj)
    if isinstance(error, dict):
        error = error.get("message") or error
    return _short(error if isinstance(error, str) else json.dumps(error))


def _short(text: str, limit: int = _ERROR_BODY_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


# ----------------------------------------------------------------------------------------------
# transport


def _chunked_lines(fp: Any) -> Iterator[tuple[bytes, float]]:
    """Lines of a chunked HTTP body with each chunk's arrival time; cheaper than http.client's."""
    pending = b""
    perf_counter = time.perf_counter
    while True:
        size_line = fp.readline(1024)
        if not size_line.endswith(b"\n"):
            raise _StreamError("server disconnected mid-stream")
        try:
            size = int(size_line.split(b";", 1)[0], 16)
        except ValueError:
            raise _StreamError("malformed chunked encoding from the server") from None
        if size == 0:
            _skip_trailers(fp)
            if pending:
                yield pending, perf_counter()
            return
        data = fp.read(size + 2)
        if len(data) < size + 2:
            raise _StreamError("server disconnected mid-stream")
        t = perf_counter()
        lines = (pending + data[:size]).split(b"\n")
        pending = lines.pop()
        for line in lines:
            yield line, t


def _skip_trailers(fp: Any) -> None:
    while fp.readline(_MAX_LINE).strip():
        pass


def _plain_lines(resp: http.client.HTTPResponse) -> Iterator[tuple[bytes, float]]:
    """Lines of a body delimited by Content-Length or by the server closing the connection."""
    while True:
        line = resp.readline(_MAX_LINE)
        if not line:
            return
        yield line.rstrip(b"\r\n"), time.perf_counter()


def _sse_data(lines: Iterator[tuple[bytes, float]]) -> Iterator[tuple[bytes, float]]:
    """`data:` payloads of an SSE stream; `event:`, comment and blank lines carry nothing we need."""
    for line, t in lines:
        if line.startswith(b"data:"):
            yield line[5:].strip(), t


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


# ----------------------------------------------------------------------------------------------
# the client


class SGLangClient:
    """Talks to one SGLang server (or the simulator). Thread-safe: one connection per thread."""

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
        self.request_timeout = request_timeout
        self.engine: Engine = engine or SGLang()
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
        return f"SGLangClient({self.base_url!r}, api_key={'***' if self._api_key else None})"

    # -- streamed generation ---------------------------------------------------------------

    def generate(self, prompt: Prompt, sampling: SamplingParams, index: int, round_start: float) -> RequestRecord:
        """Send one prompt, stream the answer, and return what was seen; never raises."""
        request = self.engine.request(prompt, sampling, self.model)
        path, body = request.path, json.dumps(request.payload).encode()
        stream = _Stream(round_start, request.mode, self.engine)
        with self._tracked():
            return self._generate(index, path, body, stream, round_start)

    def _generate(self, index: int, path: str, body: bytes, stream: _Stream, round_start: float) -> RequestRecord:
        sent = 0.0
        for attempt in (0, 1):
            sent = time.perf_counter() - round_start
            if self._aborted:
                return stream.failed(index, sent, "not sent: the server stopped answering (aborted)")
            try:
                self._stream(path, body, stream, round_start + sent)
                return stream.record(index, sent)
            except _StaleConnection:
                self._drop_connection()
                if attempt:
                    return stream.failed(index, sent, "server disconnected before answering")
            except Exception as exc:  # any failure is data about the server, not a crash
                self._drop_connection()
                return stream.failed(index, sent, self._redact(_describe(exc, self.request_timeout)))
        raise AssertionError("unreachable")

    def _stream(self, path: str, body: bytes, stream: _Stream, t_sent: float) -> None:
        deadline = t_sent + self.request_timeout
        conn, reused = self._connection()
        try:
            if conn.sock is not None:  # a kept-alive socket still has the last request's timeout
                conn.sock.settimeout(self.request_timeout)
            conn.request("POST", self._target.prefix + path, body, self._headers)
            sock = conn.sock
            if sock is not None:
                sock.settimeout(max(deadline - time.perf_counter(), 1e-3))
                self._watch(sock)
            self.last_activity = time.monotonic()
            resp = conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
            if reused:
                raise _StaleConnection from exc
            raise
        self._local.used = True
        if resp.status != 200:
            detail = _short(resp.read(4096).decode("utf-8", "replace"))
            raise _StreamError(f"HTTP {resp.status} {resp.reason}: {detail}")
        lines = _chunked_lines(resp.fp) if resp.chunked else _plain_lines(resp)
        events = _sse_data(lines)
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
            return  # the body ended without [DONE]: `_Stream.record` reports it
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
        with self._activity:
            self._sockets.add(sock)

    def stalled_for(self) -> float:
        """Seconds without a byte from the server while requests are in flight (0 when none are)."""
        with self._activity:
            return time.monotonic() - self.last_activity if self._in_flight else 0.0

    def abort(self) -> None:
        """Cut every open request short and send no more (their records fail): for a server that
        stopped answering. A request cut short is not retried on a fresh connection."""
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
        """POST /flush_cache until it answers 200; SGLang refuses while any request is running.

        Returns False if the server stayed busy for `timeout` seconds; raises `ServerError` for an
        answer that retrying cannot fix (401/403/404) and for any transport failure (refused, reset,
        a broken HTTP answer), naming the URL and the reason, and `StalledServer` when one call gets
        no answer within `stall_timeout` seconds (a hung server).
        """
        deadline = time.monotonic() + timeout
        pause = 0.02
        call_timeout = max(0.1, min(timeout, stall_timeout))
        while True:
            try:
                status, body = self._call("POST", "/flush_cache", timeout=call_timeout)
            except OSError as exc:  # _call turns http.client errors into ConnectionError
                reason = _transport_reason(exc, call_timeout)
                if isinstance(exc, TimeoutError):
                    raise StalledServer(
                        self._redact(
                            f"POST {self.base_url}/flush_cache failed: {reason} (stall_timeout {stall_timeout:g} s); "
                            "the server made no progress: it is hung (stopped, deadlocked, or a GPU fault)"
                        )
                    ) from None
                raise ServerError(self._redact(f"POST {self.base_url}/flush_cache failed: {reason}")) from None
            if status == 200:
                return True
            if status in (401, 403, 404):
                raise ServerError(self._redact(f"POST /flush_cache: HTTP {status}: {_short(body)}"))
            if time.monotonic() + pause > deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.5)

    def version_info(self, path: str) -> dict[str, Any]:
        """An engine's version endpoint (vLLM's `/version`), as server info with a `version`."""
        return self._json_or_none(path) or {}

    def server_info(self) -> dict[str, Any]:
        """`/server_info` (resolved server args, version, internal_states); old name as fallback."""
        return self._json_with_fallback("/server_info", "/get_server_info")

    def model_info(self) -> dict[str, Any]:
        return self._json_with_fallback("/model_info", "/get_model_info")

    def loads(self) -> dict[str, Any] | None:
        """`/v1/loads` (accelerator name and count); None on servers that do not have it."""
        return self._json_or_none("/v1/loads")

    def metrics_text(self, path: str = "/metrics") -> str | None:
        """Prometheus text from `/metrics`; None when the server runs without --enable-metrics."""
        status, body = self._checked_call("GET", path, absent_ok=True)
        return None if status in (404, 405) else body

    def health_generate(self, timeout: float = 30.0) -> bool:
        """True once the server can generate (SGLang answers 503 while warming up)."""
        return self._probe("/health_generate", timeout)

    def ready(self, timeout: float = 5.0) -> bool:
        """True when `/ready` says the server is up; the cheap probe (generates nothing)."""
        return self._probe("/ready", timeout)

    def _probe(self, path: str, timeout: float) -> bool:
        try:
            status, _ = self._call("GET", path, timeout=timeout)
        except OSError:
            return False
        return status == 200

    def _json_with_fallback(self, path: str, old_path: str) -> dict[str, Any]:
        data = self._json_or_none(path)
        if data is None:
            data = self._json_or_none(old_path)
        if data is None:
            raise ServerError(f"{self.base_url}: neither {path} nor {old_path} exists")
        return data

    def _json_or_none(self, path: str) -> dict[str, Any] | None:
        status, body = self._checked_call("GET", path, absent_ok=True)
        if status in (404, 405):
            return None
        try:
            data = json.loads(body)
        except json.JSONDecodeError:
            raise ServerError(f"GET {path}: answer is not JSON: {_short(body, 120)}") from None
        if not isinstance(data, dict):
            raise ServerError(f"GET {path}: expected a JSON object, got {type(data).__name__}")
        return data

    def _checked_call(self, method: str, path: str, *, absent_ok: bool) -> tuple[int, str]:
        try:
            status, body = self._call(method, path, timeout=_CONTROL_TIMEOUT)
        except OSError as exc:
            raise ServerError(self._redact(f"{method} {self.base_url}{path}: {exc}")) from None
        if status == 200 or (absent_ok and status in (404, 405)):
            return status, body
        raise ServerError(self._redact(f"{method} {path}: HTTP {status}: {_short(body)}"))

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


def _loads(payload: bytes) -> Any:
    try:
        return json.loads(payload)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise _StreamError(f"malformed chunk (not JSON): {_short(payload.decode('utf-8', 'replace'), 80)}") from None


def _transport_reason(exc: OSError, timeout: float) -> str:
    """Why a control call got no answer: refused, timed out, or the exception's own words."""
    if isinstance(exc, TimeoutError | socket.timeout):
        return f"timeout: no answer within {timeout:g} s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (server not running?)"
    text = _short(str(exc), 200)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _describe(exc: BaseException, timeout: float) -> str:
    """A short, stable reason string for a failed request."""
    if isinstance(exc, _StreamError):
        return str(exc)
    if isinstance(exc, TimeoutError | socket.timeout):
        return f"timeout: no complete answer within {timeout:g} s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (server not running?)"
    if isinstance(exc, http.client.IncompleteRead | http.client.RemoteDisconnected | ConnectionError):
        return f"server disconnected: {type(exc).__name__}"
    if isinstance(exc, http.client.HTTPException):
        return f"bad HTTP answer: {type(exc).__name__}: {_short(str(exc), 120)}"
    return f"{type(exc).__name__}: {_short(str(exc), 200)}"


# ----------------------------------------------------------------------------------------------
# load driver


@dataclass(frozen=True, slots=True)
class RoundResult:
    """One pass over a list of prompts: records in prompt order, and the perf_counter span."""

    records: tuple[RequestRecord, ...]
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


def run_requests(
    client: SGLangClient,
    prompts: Sequence[Prompt],
    sampling: SamplingParams,
    *,
    concurrency: int,
    request_rate: float | None = None,
    seed: int = 0,
    on_record: Callable[[RequestRecord], None] | None = None,
    stall_timeout: float | None = None,
) -> RoundResult:
    """Send every prompt once and wait for all answers.

    Closed loop (`request_rate` None): `concurrency` workers, each sending its next prompt as soon as
    its previous answer ends. Open loop: arrivals are a Poisson process at `request_rate` per second
    (exponential gaps from `random.Random(seed)`, first arrival at once), at most `concurrency` in
    flight; an arrival finding all workers busy waits, and its `sent` is when it really went out.
    Worker threads are started before the round's clock starts, so thread start-up (slow on a busy
    machine) never delays the first requests. `on_record` is called (serialised) as each request
    finishes. Each request is bounded by the client's `request_timeout`, so this returns in bounded time;
    with `stall_timeout`, a server that sends nothing for that long while requests are in flight ends
    the round at once with `StalledServer` (a hung server must not hold the night until the timeout).
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if request_rate is not None and not request_rate > 0:
        raise ValueError(f"request_rate must be > 0, got {request_rate}")
    driver = _Driver(client, prompts, sampling, on_record, stall_timeout)
    threads = driver.start_workers(min(concurrency, len(prompts)))
    driver.start = time.perf_counter()
    if request_rate is None:
        driver.dispatch_all()
    else:
        driver.dispatch_poisson(request_rate, seed)
    driver.stop_workers(threads)
    end = time.perf_counter()
    return RoundResult(driver.finished_records(), driver.start, end)


class _Driver:
    """Worker threads of one round pulling prompt indexes from a queue; records kept by index."""

    def __init__(
        self,
        client: SGLangClient,
        prompts: Sequence[Prompt],
        sampling: SamplingParams,
        on_record: Callable[[RequestRecord], None] | None,
        stall_timeout: float | None = None,
    ) -> None:
        self.client, self.prompts, self.sampling, self.on_record = client, prompts, sampling, on_record
        self.stall_timeout = stall_timeout
        self.records: list[RequestRecord | None] = [None] * len(prompts)
        self.work: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.failure: BaseException | None = None
        self.start = 0.0  # set after the workers are up, before the first index is queued

    def start_workers(self, n: int) -> list[threading.Thread]:
        """Start `n` workers and return once every one of them is running."""
        ready = threading.Barrier(n + 1)
        threads = [
            threading.Thread(target=self._worker, args=(ready,), name=f"specperf-worker-{k}", daemon=True)
            for k in range(n)
        ]
        for thread in threads:
            thread.start()
        ready.wait()
        return threads

    def dispatch_all(self) -> None:
        for i in range(len(self.prompts)):
            self.work.put(i)

    def dispatch_poisson(self, rate: float, seed: int) -> None:
        rng = random.Random(seed)
        arrival = 0.0
        for i in range(len(self.prompts)):
            delay = self.start + arrival - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            if self.stall_timeout is not None:
                self._check_progress()
            if self.failure is not None:
                return
            self.work.put(i)
            arrival += rng.expovariate(rate)

    def stop_workers(self, threads: list[threading.Thread]) -> None:
        """Wait for the workers; watch the server's progress meanwhile (the stall watchdog)."""
        for _ in threads:
            self.work.put(None)
        poll = None if self.stall_timeout is None else min(1.0, self.stall_timeout / 4)
        for thread in threads:
            thread.join(poll)
            while thread.is_alive():
                self._check_progress()
                thread.join(poll)

    def _check_progress(self) -> None:
        assert self.stall_timeout is not None
        silent = self.client.stalled_for()
        if silent > self.stall_timeout and self.failure is None:
            self.failure = StalledServer(
                f"server at {self.client.base_url} made no progress for {silent:.0f} s (stall_timeout "
                f"{self.stall_timeout:g} s) with requests in flight: no byte of any answer arrived; it is "
                "hung (stopped, deadlocked, or a GPU fault)"
            )
            self.client.abort()

    def _worker(self, ready: threading.Barrier) -> None:
        ready.wait()
        try:
            while (i := self.work.get()) is not None:
                if self.failure is not None:
                    continue  # drain: a callback failed, stop sending
                record = self.client.generate(self.prompts[i], self.sampling, i, self.start)
                self.records[i] = record
                if self.on_record is not None:
                    self._callback(record)
        finally:
            self.client.release_connection()

    def _callback(self, record: RequestRecord) -> None:
        assert self.on_record is not None
        with self.lock:
            if self.failure is not None:
                return
            try:
                self.on_record(record)
            except BaseException as exc:  # re-raised in the caller's thread by finished_records
                self.failure = exc

    def finished_records(self) -> tuple[RequestRecord, ...]:
        """All records in prompt order; re-raises an `on_record` failure in the caller's thread."""
        if self.failure is not None:
            raise self.failure
        done = [r for r in self.records if r is not None]
        assert len(done) == len(self.records), "a worker ended without answering its prompt"
        return tuple(done)
