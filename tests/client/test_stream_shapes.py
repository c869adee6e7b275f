"""Stream shapes the simulator does not produce, served verbatim by a tiny in-process HTTP server.

Real SGLang's chat stream (separate finish / sglext / usage chunks), a mid-stream error event, an
abort, malformed and truncated streams, and bodies framed without chunked encoding.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import pytest

from pytest_specperf.config.workloads import Prompt, SamplingParams
from pytest_specperf.measure.http import ServerClient

TEXT = Prompt("t", "hello", None, "x")
CHAT = Prompt("c", None, ({"role": "user", "content": "hello"},), "x")
SAMPLING = SamplingParams(max_new_tokens=3)


def sse(*events: Any) -> list[bytes]:
    return [b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n" for e in events]


def gen_event(text: str, n: int, finish: Any = None, **extra: Any) -> dict[str, Any]:
    meta = {"id": "r", "finish_reason": finish, "prompt_tokens": 4, "completion_tokens": n, "cached_tokens": 1}
    return {"text": text, "meta_info": {**meta, **extra}}


SPEC = {"spec_verify_ct": 2, "spec_num_correct_drafts": 1, "spec_num_proposed_drafts": 10}
GOOD_GENERATE = sse(
    gen_event("a", 1), gen_event("a b", 2), gen_event("a b c", 3, {"type": "length", "length": 3}, **SPEC), b"[DONE]"
)
# serving_chat.py order: role chunk, content deltas, finish chunk, sglext chunk, usage chunk, [DONE]
REAL_CHAT = sse(
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {"content": " b c"}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "matched_stop": 2}]},
    {"choices": [], "sglext": {"spec_tokens_details": {**SPEC, "spec_accept_length": 1.5}}},
    {
        "choices": [],
        "usage": {"prompt_tokens": 9, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 5}},
    },
    b"[DONE]",
)


class Canned:
    """What the fake server answers next: status, body pieces, and how to frame them."""

    status = 200
    pieces: ClassVar[list[bytes]] = GOOD_GENERATE
    chunked = True
    truncate = False
    seen_auth: ClassVar[list[str | None]] = []
    seen_ports: ClassVar[list[int]] = []


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Canned.seen_auth.append(self.headers.get("Authorization"))
        Canned.seen_ports.append(self.client_address[1])
        self.send_response(Canned.status)
        self.send_header("Content-Type", "text/event-stream")
        if Canned.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(sum(len(p) for p in Canned.pieces)))
        self.end_headers()
        for piece in Canned.pieces:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if Canned.chunked else piece)
        if Canned.truncate:
            self.close_connection = True
            return
        if Canned.chunked:
            self.wfile.write(b"0\r\n\r\n")


@pytest.fixture
def server(serve: Callable[[type[BaseHTTPRequestHandler]], str]) -> str:
    return serve(Handler)


@pytest.fixture(autouse=True)
def reset() -> Iterator[None]:
    yield
    Canned.status, Canned.pieces, Canned.chunked, Canned.truncate = 200, GOOD_GENERATE, True, False
    Canned.seen_auth, Canned.seen_ports = [], []


def test_generate_stream(server: str) -> None:
    record = ServerClient(server, api_key="k3y").generate(TEXT, SAMPLING, 5, time.perf_counter())
    assert record.ok, record.error
    assert (record.index, record.num_chunks, len(record.chunk_gaps)) == (5, 3, 2)
    assert (record.prompt_tokens, record.completion_tokens, record.cached_tokens) == (4, 3, 1)
    assert (record.verify_ct, record.accepted_drafts, record.proposed_drafts) == (2, 1, 10)
    assert record.finish_reason == "length"
    assert Canned.seen_auth == ["Bearer k3y"]


def test_real_sglang_chat_shape(server: str) -> None:
    Canned.pieces = REAL_CHAT
    record = ServerClient(server).generate(CHAT, SAMPLING, 0, time.perf_counter())
    assert record.ok, record.error
    assert record.num_chunks == 2 and len(record.chunk_gaps) == 1  # role/finish/usage chunks carry no tokens
    assert (record.prompt_tokens, record.completion_tokens, record.cached_tokens) == (9, 3, 5)
    assert (record.verify_ct, record.accepted_drafts, record.proposed_drafts) == (2, 1, 10)
    assert record.finish_reason == "stop"
    assert record.last_chunk is not None and record.first_chunk is not None
    assert record.last_chunk >= record.first_chunk


def test_same_text_same_hash_on_both_endpoints(server: str) -> None:
    text_record = ServerClient(server).generate(TEXT, SAMPLING, 0, time.perf_counter())
    Canned.pieces = REAL_CHAT
    chat_record = ServerClient(server).generate(CHAT, SAMPLING, 0, time.perf_counter())
    assert text_record.output_hash == chat_record.output_hash  # "a b c" both ways


def test_keep_alive_connection_is_reused(server: str) -> None:
    client = ServerClient(server)
    records = [client.generate(TEXT, SAMPLING, i, time.perf_counter()) for i in range(5)]
    assert all(r.ok for r in records)
    assert len(set(Canned.seen_ports)) == 1  # one TCP connection for all five requests
    client.release_connection()
    assert client.generate(TEXT, SAMPLING, 5, time.perf_counter()).ok
    assert len(set(Canned.seen_ports)) == 2


@pytest.mark.parametrize(
    ("pieces", "expected"),
    [
        (
            sse(gen_event("a", 1), {"error": {"message": "out of memory", "type": "x", "code": 500}}, b"[DONE]"),
            "server error mid-stream: out of memory",
        ),
        (sse(gen_event("a", 1), b"{not json", b"[DONE]"), "malformed chunk"),
        (sse(b"{not json", b"[DONE]"), "malformed chunk (not JSON)"),
        (sse(gen_event("a", 1), {"text": "a"}, b"[DONE]"), "malformed chunk"),
        (sse(gen_event("a", 1), [1, 2], b"[DONE]"), "malformed chunk"),
        (sse(gen_event("a", 1)), "stream ended before [DONE]"),
        (sse(gen_event("a", 1), b"[DONE]"), "without a finish_reason"),
        (sse(b"[DONE]"), "without any output chunk"),
        (sse(gen_event("a", 1, {"type": "abort", "message": "client gone"}), b"[DONE]"), "aborted"),
        (sse(gen_event("a", 1, {"type": "length"}, completion_tokens=None), b"[DONE]"), "completion_tokens"),
    ],
)
def test_broken_streams_become_error_records(server: str, pieces: list[bytes], expected: str) -> None:
    Canned.pieces = pieces
    client = ServerClient(server)
    record = client.generate(TEXT, SAMPLING, 0, time.perf_counter())
    assert record.error is not None and expected in record.error
    assert record.completion_tokens == 0 and record.verify_ct is None
    Canned.pieces = GOOD_GENERATE
    assert client.generate(TEXT, SAMPLING, 1, time.perf_counter()).ok  # the client recovers


def test_chat_error_object_mid_stream(server: str) -> None:
    Canned.pieces = [*REAL_CHAT[:2], *sse({"object": "error", "message": "boom", "code": 500}, b"[DONE]")]
    record = ServerClient(server).generate(CHAT, SAMPLING, 0, time.perf_counter())
    assert record.error == "server error mid-stream: boom"


def test_chat_without_usage_is_an_error(server: str) -> None:
    Canned.pieces = [*REAL_CHAT[:5], REAL_CHAT[-1]]
    record = ServerClient(server).generate(CHAT, SAMPLING, 0, time.perf_counter())
    assert record.error is not None and "completion_tokens" in record.error


def test_truncated_chunked_body(server: str) -> None:
    Canned.pieces, Canned.truncate = GOOD_GENERATE[:2], True
    record = ServerClient(server).generate(TEXT, SAMPLING, 0, time.perf_counter())
    assert record.error is not None and "disconnected" in record.error
    assert record.num_chunks == 2


def test_content_length_body_and_crlf_lines(server: str) -> None:
    Canned.chunked = False
    Canned.pieces = [p.replace(b"\n", b"\r\n") for p in [b"event: ping\n\n", b": comment\n\n", *GOOD_GENERATE]]
    record = ServerClient(server).generate(TEXT, SAMPLING, 0, time.perf_counter())
    assert record.ok, record.error
    assert record.num_chunks == 3


def test_http_error_body_is_short_and_key_free(server: str) -> None:
    Canned.status, Canned.pieces = 401, [b'{"error": "bad key sk-12345 ' + b"x" * 5000 + b'"}']
    record = ServerClient(server, api_key="sk-12345").generate(TEXT, SAMPLING, 0, time.perf_counter())
    assert record.error is not None and record.error.startswith("HTTP 401")
    assert "sk-12345" not in record.error and len(record.error) < 400
