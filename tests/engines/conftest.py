"""Tiny HTTP servers for replays: canned event streams (chunked), as a real engine sends them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from canned_streams import QuietServer, send_stream


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
