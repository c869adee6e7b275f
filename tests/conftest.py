"""What every test folder shares: the folder itself on `sys.path`, so the helper modules beside this
file (`gitrepos`, `lanes`, `simharness`, `standin`, `suite_tables`, `vllm_models`) are imported by name
from any of them, under xdist too; a header line per lane that needs more than Python (`lanes.py`: ran,
or skipped and why); the simulator started for one test (`sim_factory`, from `simharness`); and a
stand-in HTTP server (`serve`, `canned_server`) for tests that replay what an engine sent."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from lanes import header_lines
from simharness import Sim, launch_sim
from standin import QuietServer, send_stream


def pytest_report_header() -> list[str]:
    return header_lines()


@pytest.fixture
def sim_factory() -> Iterator[Callable[..., Sim]]:
    """``sim_factory(args, env=None, wait=True, api_key=None) -> Sim``; every simulator it started is
    stopped (TERM, then KILL) at teardown and its log removed."""
    started: list[Sim] = []

    def start(args: list[str], **kw: Any) -> Sim:
        sim = launch_sim(args, **kw)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()
        sim.log_path.unlink(missing_ok=True)


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
