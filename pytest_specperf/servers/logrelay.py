"""The server's output pipe, written to its log file through the redactor.

SGLang prints its resolved arguments at every start, the API key among them in clear text
(`server_args=...`), and a CI job that uploads the run folder would publish it. So the plugin owns
the server's output: the server writes into a pipe, and this small process (`python -m
pytest_specperf.servers.logrelay LOG --secrets-fd N`) writes each line to the log with every
secret hidden (the known shapes, `--api-key X`, `'api_key': '...'`, and the literal secrets it
reads from file descriptor N, never from its arguments or environment, which `ps` shows).

A process, not a thread of pytest: a server may outlive the pytest process that started it (an
xdist worker's server still used by another worker, `--specperf-keep-servers`), and a server
whose pipe reader is gone dies of SIGPIPE at its next log line. The relay ends when every writer
has closed the pipe (the server's whole tree is gone).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from pytest_specperf.common.redact import REDACTED, redact_text

MAX_LINE = 1 << 20  # a line without a newline is cut into pieces of this size


def redact_line(line: str, secrets: Iterable[str]) -> str:
    """One log line as it may be written: known secret shapes and the literal secrets hidden."""
    for secret in secrets:
        line = line.replace(secret, REDACTED)
    return redact_text(line)


def relay(source: Iterable[bytes], log: Path, secrets: list[str]) -> None:
    with log.open("ab", buffering=0) as out:
        for raw in source:
            out.write(redact_line(raw.decode("utf-8", "replace"), secrets).encode("utf-8"))


def _lines(stream: object) -> Iterable[bytes]:
    read = stream.readline  # type: ignore[attr-defined]
    while chunk := read(MAX_LINE):
        yield chunk


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pytest_specperf.servers.logrelay")
    parser.add_argument("log", type=Path)
    parser.add_argument("--secrets-fd", type=int)
    args = parser.parse_args(argv)
    secrets: list[str] = []
    if args.secrets_fd is not None:
        with os.fdopen(args.secrets_fd, "rb") as fd:
            secrets = [s for s in fd.read().decode("utf-8", "replace").split("\0") if s]
    relay(_lines(sys.stdin.buffer), args.log, sorted(secrets, key=len, reverse=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
