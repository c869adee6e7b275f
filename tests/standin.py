"""A stand-in HTTP server on 127.0.0.1, for tests that replay what a real engine sent or hold its
requests: one server class and one way to answer with an event stream, shared by every test folder
(the `serve` and `canned_server` fixtures in tests/conftest.py start and stop it)."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hangs up (after an error event, on an interrupt) is part of what is tested


def send_stream(handler: BaseHTTPRequestHandler, pieces: list[bytes]) -> None:
    """Answer 200 with `pieces` as an event stream, one HTTP chunk each."""
    handler.rfile.read(int(handler.headers.get("Content-Length", 0)))
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    for piece in pieces:
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
    handler.wfile.write(b"0\r\n\r\n")
