"""Headless Chromium, driven over the DevTools protocol on a pipe: pages load, their errors are caught.

Chromium's `--remote-debugging-pipe` reads protocol commands from file descriptor 3 and writes answers
and events to descriptor 4, each a JSON message ended by a NUL byte. That needs no port, no websocket
client and no package besides the standard library, and nothing listens on the network. The flags
are the ones this kind of machine needs (a fresh profile, no background connections: the machine's
closed network refuses them).

Every wait is for a protocol answer or event, bounded by `TIMEOUT_S`; the browser runs in its own
process group, killed whole when it is closed.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import signal
import struct
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TIMEOUT_S = 60.0
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)


@dataclass
class Loaded:
    """What a page did while it loaded: errors (exceptions, console errors, failed loads), requests."""

    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


class Browser:
    """One Chromium process and one page (tab) in it."""

    def __init__(self, executable: str, profile: Path) -> None:
        ours, theirs_in = os.pipe()  # we write, Chromium reads (its fd 3)
        theirs_out, mine = os.pipe()  # Chromium writes (its fd 4), we read

        def descriptors() -> None:
            """In the child: the pipe ends as fds 3 and 4. Copied out of the way first (either may be 3 or 4
            already), then dup2'ed onto 3 and 4, which makes them survive the exec."""
            reading, writing = fcntl.fcntl(ours, fcntl.F_DUPFD, 10), fcntl.fcntl(mine, fcntl.F_DUPFD, 10)
            os.dup2(reading, 3)
            os.dup2(writing, 4)

        self.process = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,
            preexec_fn=descriptors,
            start_new_session=True,
        )
        os.close(ours)
        os.close(mine)
        self._write, self._read = theirs_in, theirs_out
        self._buffer = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=self.session)

    # ---- the protocol -------------------------------------------------------------------------

    def call(self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None) -> dict[str, Any]:
        """Send one command and wait for its answer; events that arrive meanwhile are kept."""
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._receive()
            if answer.get("id") == self._next:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self.events.append(answer)

    def _receive(self) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT_S
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._read], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError(f"Chromium did not answer within {TIMEOUT_S:.0f} s")
            chunk = os.read(self._read, 1 << 16)
            if not chunk:
                raise EOFError("Chromium closed its end of the DevTools pipe")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def wait_for(self, found: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The first event (kept or new) that `found` accepts."""
        for event in self.events:
            if found(event):
                return event
        while True:
            event = self._receive()
            self.events.append(event)
            if found(event):
                return event

    # ---- a page -------------------------------------------------------------------------------

    def open(self, path: Path, *, width: int = 1280, height: int = 900) -> Loaded:
        """Load a file in a viewport of width x height; what it did while loading (until its load event)."""
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=self.session,
        )
        self.events.clear()
        frame = self.call("Page.navigate", {"url": path.resolve().as_uri()}, session=self.session)
        if "errorText" in frame:
            raise RuntimeError(f"{path}: {frame['errorText']}")
        self.wait_for(lambda e: e.get("method") == "Page.loadEventFired")
        self.evaluate("new Promise(resolve => requestAnimationFrame(() => resolve(true)))")  # one frame drawn
        return self.loaded()

    def loaded(self) -> Loaded:
        found = Loaded()
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                found.errors.append(details.get("exception", {}).get("description") or details.get("text", "?"))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert", "warning"):
                found.errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
            elif method == "Log.entryAdded" and params["entry"]["level"] in ("error", "warning"):
                found.errors.append(f"{params['entry']['source']}: {params['entry']['text']}")
            elif method == "Network.requestWillBeSent":
                found.requests.append(params["request"]["url"])
            elif method == "Network.loadingFailed":
                found.errors.append(f"failed to load: {params.get('errorText')}")
        return found

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (a promise is awaited); an exception raises."""
        done = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=self.session,
        )
        if "exceptionDetails" in done:
            raise RuntimeError(f"{expression}: {done['exceptionDetails']}")
        return done["result"].get("value")

    def screenshot(self) -> bytes:
        """The viewport as a PNG."""
        shot = self.call("Page.captureScreenshot", {"format": "png"}, session=self.session)
        return base64.b64decode(shot["data"])

    def close(self) -> None:
        """Ask Chromium to close, then kill whatever of its process group is left (helpers included)."""
        try:
            self.call("Browser.close")
            self.process.wait(timeout=10)
        except (OSError, RuntimeError, TimeoutError, EOFError, subprocess.TimeoutExpired):
            pass
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
            for fd in (self._write, self._read):
                os.close(fd)


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's header (its IHDR chunk)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height
