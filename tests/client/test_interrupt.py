"""An interrupted round sends nothing more: Ctrl-C (or SIGTERM, which the plugin turns into
KeyboardInterrupt) during a round is followed by the server's teardown, and SGLang drains every
request it receives after its SIGTERM; a worker still sending the rest of the round would hold the
stop for as many answers (20 s on a real night)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from types import FrameType

import pytest

from pytest_specperf.config.workloads import Prompt, SamplingParams
from pytest_specperf.engines import engine_for
from pytest_specperf.measure.http import ServerClient
from pytest_specperf.measure.load import run_requests


class HeldServer:
    """A stand-in server that records each request's arrival and answers none until released."""

    def __init__(self) -> None:
        self.arrivals: list[str] = []
        self.in_flight = threading.Event()  # set once `expected` requests are held
        self.release = threading.Event()
        self.expected = 2
        self.url = ""

    def handler(self) -> type[BaseHTTPRequestHandler]:
        held = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                held.arrivals.append(self.path)
                if len(held.arrivals) == held.expected:
                    held.in_flight.set()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                self.wfile.flush()
                held.release.wait(30)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


@pytest.fixture
def held_server(serve: Callable[[type[BaseHTTPRequestHandler]], str]) -> Iterator[HeldServer]:
    server = HeldServer()
    server.url = serve(server.handler())
    yield server
    server.release.set()  # before `serve` stops the server: a held answer would hold its shutdown


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def test_an_interrupted_round_sends_no_further_request(held_server: HeldServer) -> None:
    assert threading.current_thread() is threading.main_thread(), "signals reach the main thread only"
    previous = signal.signal(signal.SIGUSR1, _interrupt)
    main = threading.main_thread().ident
    assert main is not None

    def signal_when_both_requests_are_held() -> None:
        if held_server.in_flight.wait(30):
            signal.pthread_kill(main, signal.SIGUSR1)

    sender = threading.Thread(target=signal_when_both_requests_are_held, daemon=True)
    sender.start()
    client = ServerClient(held_server.url, request_timeout=60, engine=engine_for("sglang"))
    prompts = [Prompt(f"p{i}", f"prompt {i}", None, "x") for i in range(6)]
    try:
        with pytest.raises(KeyboardInterrupt):
            run_requests(client, prompts, SamplingParams(max_new_tokens=8), concurrency=2)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    held_server.release.set()  # the server drains what it holds, as SGLang does after its SIGTERM
    for worker in [t for t in threading.enumerate() if t.name.startswith("specperf-worker-")]:
        worker.join(30)
        assert not worker.is_alive()
    assert held_server.arrivals == ["/generate", "/generate"]  # the two in flight, and nothing after
