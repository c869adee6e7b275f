"""Reading a streamed answer: SSE framing and the engines' event formats, into a `RequestRecord`.

Formats (the engine contracts in docs/engines/):

- An engine's own stream (mode ``generate``, SGLang's ``POST /generate``): each SSE event carries the
  *cumulative* text and the counts so far, read by `Engine.native_event`; the final one has the
  finish reason and, with speculation, the verify counts (`Engine.spec_counts`). Every event is one
  chunk, whatever number of decode steps it covers (a busy server merges several steps into one
  event); an empty event before the first text (real SGLang opens its stream with one) is none.
  Events after the first non-empty one are only framed, not JSON-parsed: their cumulative
  text and ids would make parsing all of them quadratic in the output length; the last one is
  parsed at ``[DONE]``.
- OpenAI chat and text completions (SGLang's and vLLM's ``/v1/...``): a role chunk with empty
  content, content-delta chunks, a chunk whose choice has ``finish_reason``, then response-level
  chunks with ``choices: []`` carrying ``usage`` (``completion_tokens``) and the engine's
  speculation counters (SGLang ``sglext.spec_tokens_details``, vLLM ``metrics.speculative_decoding``;
  read by `Engine.spec_counts`), then ``[DONE]``. SGLang sends the finish reason and the extension
  block in chunks of their own; these fields are accepted on any chunk, so a server that folds them
  into the last content chunk works too. Only content-carrying chunks count
  as chunks (the role/finish/usage chunks carry no tokens and would add fake near-zero gaps); the
  finish chunk's arrival still ends E2E, because it marks the final step. Output tokens come from
  ``usage``, never from chunk counts.

Definitions (docs/metrics.md): ``first_chunk`` is the first chunk with non-empty text;
``chunk_gaps`` are the gaps between consecutive chunks, so there are ``num_chunks - 1``; all are
``time.perf_counter()`` seconds relative to the round start.

A malformed event, a mid-stream ``data: {"error": ...}``, an ``abort`` finish reason or a stream
that ends early raise `StreamError`, whose message becomes the record's ``error``. The chunked
decoder is our own: ``http.client``'s costs about twice the CPU per chunk, and at high
concurrency the client must not be what limits measured throughput
(``benchmarks/client_overhead.py``).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import time
from collections.abc import Iterator
from typing import Any, overload

from pytest_specperf.engines.base import Engine, SpecCounts, StreamMode
from pytest_specperf.measure.records import RequestRecord

_MAX_LINE = 1 << 24  # an SSE event with 16 MiB of cumulative text is past anything sane
_ERROR_BODY_CHARS = 300


class StreamError(Exception):
    """A reason a streamed request failed; its message becomes `RequestRecord.error`."""


class ResponseStream:
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
            self.feed(loads(payload), t)
        elif payload[:1] == b"{" and payload[-1:] == b"}":
            self.chunk(t, True)
            self.pending = payload
        else:
            raise StreamError(f"malformed chunk (not a JSON object): {short(payload.decode('utf-8', 'replace'), 80)}")

    def end(self) -> None:
        """[DONE] arrived: read the final fields from the last payload that was only framed."""
        self.done = True
        if self.pending is not None:
            self.feed(loads(self.pending), self.last or 0.0, count=False)
            self.pending = None

    def feed(self, obj: Any, t: float, count: bool = True) -> None:
        if not isinstance(obj, dict):
            raise StreamError(f"malformed chunk: expected a JSON object, got {type(obj).__name__}")
        if "error" in obj or obj.get("object") == "error":
            raise StreamError(f"server error mid-stream: {_error_text(obj)}")
        if self.chat:
            self._feed_chat(obj, t)
        else:
            self._feed_generate(obj, t, count)

    def _feed_generate(self, obj: dict[str, Any], t: float, count: bool) -> None:
        try:
            event = self.engine.native_event(obj)
        except ValueError as exc:
            raise StreamError(f"malformed chunk: {exc}") from None
        # an event before the first text carries no token (real SGLang opens with an empty one), unless it
        # ends the answer
        if count and (event.text or self.first is not None or event.finish):
            self.chunk(t, bool(event.text))
        self.text = event.text
        self.finish_reason = event.finish_detail if event.finish else None
        self.prompt_tokens = event.prompt_tokens
        self.completion_tokens = event.completion_tokens
        self.cached_tokens = event.cached_tokens
        self.spec = self.engine.spec_counts(obj, self.mode) or self.spec

    def _feed_chat(self, obj: dict[str, Any], t: float) -> None:
        choices = obj.get("choices")
        if choices is None:
            choices = []
        if not isinstance(choices, list):
            raise StreamError("malformed chunk: 'choices' is not a list")
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
            raise StreamError("malformed chunk: a choice is not an object")
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
        """The finished record; raises `StreamError` if the stream did not end properly."""
        if not self.done:
            raise StreamError("stream ended before [DONE] (server disconnected)")
        if self.num_chunks == 0:
            raise StreamError("stream ended without any output chunk")
        reason = _finish_type(self.finish_reason)
        if reason is None:
            raise StreamError("stream ended without a finish_reason")
        if reason == "abort":
            raise StreamError(f"request aborted by the server: {short(json.dumps(self.finish_reason))}")
        completion = self.completion_tokens
        if isinstance(completion, bool) or not isinstance(completion, int):
            where = "usage" if self.chat else "meta_info"
            raise StreamError(f"final {where} has no integer completion_tokens")
        text = "".join(self.pieces) if self.chat else self.text
        spec = self.spec
        return self._record(
            index,
            sent,
            prompt_tokens=_int_or(self.prompt_tokens, 0),
            completion_tokens=completion,
            cached_tokens=_int_or(self.cached_tokens, 0),
            verify_ct=spec.verify_steps if spec else None,
            accepted_drafts=spec.accepted_drafts if spec else None,
            proposed_drafts=spec.proposed_drafts if spec else None,
            spec_tokens=spec.spec_tokens if spec else None,
            accept_histogram=spec.histogram if spec else None,
            finish_reason=reason,
            output_hash=hashlib.sha256(text.encode("utf-8")).hexdigest(),
            output=text,
        )

    def failed(self, index: int, sent: float, reason: str) -> RequestRecord:
        """What was seen of a failed request: its timings so far, no tokens (an error adds no throughput)."""
        return self._record(index, sent, error=reason)

    def _record(self, index: int, sent: float, **fields: Any) -> RequestRecord:
        return RequestRecord(
            index=index,
            sent=sent,
            first_chunk=self.first,
            last_chunk=self.last,
            num_chunks=self.num_chunks,
            chunk_gaps=tuple(self.gaps),
            **fields,
        )


def _finish_type(reason: Any) -> str | None:
    """A native finish reason is an object ({"type": ..., ...}); OpenAI's is the bare type string."""
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
    return short(error if isinstance(error, str) else json.dumps(error))


def short(text: str, limit: int = _ERROR_BODY_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


# ----------------------------------------------------------------------------------------------
# framing: chunked transfer and SSE


def _chunked_lines(fp: Any) -> Iterator[tuple[bytes, float]]:
    """Lines of a chunked HTTP body with each chunk's arrival time; cheaper than http.client's."""
    pending = b""
    perf_counter = time.perf_counter
    while True:
        size_line = fp.readline(1024)
        if not size_line.endswith(b"\n"):
            raise StreamError("server disconnected mid-stream")
        try:
            size = int(size_line.split(b";", 1)[0], 16)
        except ValueError:
            raise StreamError("malformed chunked encoding from the server") from None
        if size == 0:
            _skip_trailers(fp)
            if pending:
                yield pending, perf_counter()
            return
        data = fp.read(size + 2)
        if len(data) < size + 2:
            raise StreamError("server disconnected mid-stream")
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


def sse_payloads(resp: http.client.HTTPResponse) -> Iterator[tuple[bytes, float]]:
    """`data:` payloads of a streamed answer with their arrival times, chunked or not."""
    return _sse_data(_chunked_lines(resp.fp) if resp.chunked else _plain_lines(resp))


def _sse_data(lines: Iterator[tuple[bytes, float]]) -> Iterator[tuple[bytes, float]]:
    """`data:` payloads of an SSE stream; `event:`, comment and blank lines carry nothing we need."""
    for line, t in lines:
        if line.startswith(b"data:"):
            yield line[5:].strip(), t


def loads(payload: bytes) -> Any:
    try:
        return json.loads(payload)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise StreamError(f"malformed chunk (not JSON): {short(payload.decode('utf-8', 'replace'), 80)}") from None
