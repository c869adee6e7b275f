"""Tiny HTTP servers for replays: canned event streams (chunked), as a real engine sends them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hangs up after an error event is part of what is tested


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


@pytest.fixture
def serve() -> Iterator[Callable[[type[BaseHTTPRequestHandler]], str]]:
    """`serve(Handler)` → the URL of a server on 127.0.0.1 answering with `Handler`; stopped after the test."""
    servers: list[QuietServer] = []

    def start(handler: type[BaseHTTPRequestHandler]) -> str:
        httpd = QuietServer(("127.0.0.1", 0), handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}"

    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def canned_server(serve: Callable[[type[BaseHTTPRequestHandler]], str]) -> Callable[[list[bytes]], str]:
    """`canned_server(pieces)` → the URL of a server streaming `pieces` to every POST."""

    def start(pieces: list[bytes]) -> str:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                send_stream(self, pieces)

        return serve(Handler)

    return start
