"""A vLLM suite end to end against a stand-in vLLM server built from vLLM 0.32.0's captured answers:
a speculative server whose responses carry no per-request counts (the per-request metrics flag
missing, e.g. started by a cluster template) still gets τ per round, from `/metrics` deltas; the
per-position acceptance reaches the reports; an unknown version is named in a warning."""

from __future__ import annotations

import json
import re
import textwrap
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from standin import send_stream

from pytest_specperf.report.schema import validate

DATA = Path(__file__).parent / "data" / "vllm-0.32.0"
#: what one request adds to the counters (half the ngram server's deltas over its two captured requests)
PER_REQUEST = {"drafts": 5, "draft_tokens": 13, "accepted": 8, "per_position": (4, 2, 2)}


def stream_without_metrics(endpoint: str) -> list[bytes]:
    """The captured ngram stream with `metrics` taken out of every event: what a server without
    `--per-request-spec-decode-metrics` sends."""
    events = []
    for payload in re.findall(r"^data: (.*)$", (DATA / f"{endpoint}-ngram.sse").read_text(), flags=re.M):
        if payload.strip() != "[DONE]":
            event = json.loads(payload)
            event.pop("metrics", None)
            payload = json.dumps(event)
        events.append(f"data: {payload}\n\n".encode())
    return events


@pytest.fixture
def fake_vllm(serve: Callable[[type[BaseHTTPRequestHandler]], str]) -> Callable[[str], str]:
    """`fake_vllm(version)` → the URL of a stand-in speculative vLLM server reporting that version."""

    def start(version: str) -> str:
        served = [0]
        lock = threading.Lock()
        streams = {
            "/v1/chat/completions": stream_without_metrics("chat"),
            "/v1/completions": stream_without_metrics("completions"),
        }

        def metrics() -> str:
            n = served[0]
            label = 'engine="0",model_name="/tmp/models/target"'
            lines = [
                "# TYPE vllm:spec_decode_num_drafts_total counter",
                f"vllm:spec_decode_num_drafts_total{{{label}}} {float(2 + n * PER_REQUEST['drafts'])}",
                f"vllm:spec_decode_num_draft_tokens_total{{{label}}} {float(n * PER_REQUEST['draft_tokens'])}",
                f"vllm:spec_decode_num_accepted_tokens_total{{{label}}} {float(1 + n * PER_REQUEST['accepted'])}",
            ]
            for i, per in enumerate(PER_REQUEST["per_position"]):
                lines.append(
                    f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{label},position="{i}"}} '
                    f"{float(int(i == 0) + n * per)}"
                )
            return "\n".join(lines) + "\n"

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: str, kind: str = "application/json") -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/health":
                    self._send(200, "")
                elif self.path == "/version":
                    self._send(200, json.dumps({"version": version}))
                elif self.path == "/metrics":
                    with lock:
                        text = metrics()
                    self._send(200, text, "text/plain; version=0.0.4; charset=utf-8")
                else:
                    self._send(404, json.dumps({"detail": "Not Found"}))

            def do_POST(self) -> None:
                events = streams.get(self.path)
                if events is None:
                    self.rfile.read(int(self.headers.get("Content-Length", 0)))
                    self._send(404, json.dumps({"detail": "Not Found"}))
                    return
                with lock:
                    served[0] += 1
                send_stream(self, events)

        return serve(Handler)

    return start


CONFIG = """
[specperf]
engine = "vllm"
model = "/tmp/models/target"
rounds = 2

[specperf.servers.plain]

[specperf.servers.ngram]
speculative_config = { method = "ngram", num_speculative_tokens = 3, prompt_lookup_max = 4, prompt_lookup_min = 2 }

[specperf.workloads.default]
prompts = "builtin:chat"
num_requests = 2
max_new_tokens = 32
warmup = 1
"""

SUITE = """
import pytest

@pytest.mark.specperf(server="ngram", accept_length=(2.59, 2.61))
def test_ngram(specperf):
    assert [r.accept_length_source for r in specperf.result.rounds] == ["prometheus", "prometheus"]
"""


def run_suite(pytester: pytest.Pytester, url: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    pytester.makefile(".toml", specperf=textwrap.dedent(CONFIG))
    pytester.makepyfile(test_suite=SUITE)
    report = pytester.path / "report.json"
    result = pytester.runpytest(
        f"--specperf-attach=ngram={url}",
        f"--specperf-attach=plain={url}",
        f"--specperf-json={report}",
        "--specperf-report=full",  # the acceptance block is a detail: shown in full only
        "-p",
        "no:randomly",
    )
    return result, json.loads(report.read_text())


def test_tau_from_counter_deltas_per_position_and_an_unknown_version(pytester, fake_vllm) -> None:
    result, document = run_suite(pytester, fake_vllm("0.33.0"))
    result.assert_outcomes(passed=1)  # accept_length judged on τ from the counters: 1 + 16/10 = 2.6
    assert validate(document) == []
    rows = {m["label"]: m for m in document["measurements"]}
    row = rows["ngram/default/c1"]
    assert rows["plain/default/c1"]["accept_length_source"] is None  # a plain server: no τ, no scrape
    assert row["accept_length_source"] == "prometheus"
    assert row["acceptance_per_position"] == pytest.approx([0.8, 0.4, 0.4])
    for sample in row["rounds"]:  # warmup excluded: two requests per round
        assert sample["accept_length"] == pytest.approx(2.6) and sample["accept_length_source"] == "prometheus"
        assert sample["spec_counters"] == {
            "drafts": 10,
            "draft_tokens": 26,
            "accepted": 16,
            "accepted_per_position": [8, 4, 4],
        }
        assert sample["acceptance_rate"] == pytest.approx(16 / 26)
    warning = "vllm 0.33.0 is outside the versions this plugin supports (vllm 0.26.0 to 0.32.x)"
    assert not any(warning in n for n in row["notes"])  # the session's fact, said once
    assert len([w for w in document["warnings"] if warning in w]) == 1
    out = re.sub(r"\s+", " ", result.stdout.str())
    assert "acceptance by draft position" in out
    assert "ngram/default/c1: 0.80 0.40 0.40; τ from the /metrics counter deltas" in out
    assert out.count(warning) == 1 and f"c1: {warning}" not in out


@pytest.mark.parametrize("version", ["0.32.0", "0.26.0"])
def test_a_supported_version_has_no_warning(pytester, fake_vllm, version: str) -> None:
    result, document = run_suite(pytester, fake_vllm(version))
    result.assert_outcomes(passed=1)
    assert not any("supports" in w for w in document["warnings"])
    assert not any("supports" in w for m in document["measurements"] for w in [*m["warnings"], *m["notes"]])


DEAD_SUITE = """
import pytest

@pytest.mark.specperf(server="ngram", min_speedup=1.0)
def test_speedup(specperf):
    pass

@pytest.mark.specperf(server="ngram", accept_length=(2.59, 2.61))
def test_acceptance(specperf):
    pass
"""


def test_a_reference_whose_requests_all_fail_is_an_error_on_vllm(pytester, fake_vllm, canned_server) -> None:
    """The reference's engine is dead (vLLM's own error event on every request): its row is ERROR naming the
    server and the first failure, not REGRESSION at 0.0 tok/s; the speedup that lost it says so; the
    speculative measurement stays reported and its own check still passes; pytest fails."""
    dead = (DATA / "completions-enginedead.http").read_text().split("\n\n", 1)[1]
    dead_url = canned_server([f"{event}\n\n".encode() for event in dead.strip().split("\n\n")])
    pytester.makefile(".toml", specperf=textwrap.dedent(CONFIG))
    pytester.makepyfile(test_suite=DEAD_SUITE)
    report = pytester.path / "report.json"
    result = pytester.runpytest(
        f"--specperf-attach=ngram={fake_vllm('0.32.0')}",
        f"--specperf-attach=plain={dead_url}",
        f"--specperf-json={report}",
        "--specperf-servers=ngram",
        "-p",
        "no:randomly",
    )
    result.assert_outcomes(failed=1, passed=1)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*min_speedup of ngram/default/c1 cannot be checked: the reference server 'plain'*"])
    document = json.loads(report.read_text())
    assert validate(document) == []
    reason = {e["label"]: e["reason"] for e in document["errors"]}["plain/default/c1"]
    assert "server 'plain': all 4 requests of plain/default/c1 failed" in reason and "EngineCore" in reason
    rows = {m["label"]: m for m in document["measurements"]}
    assert "plain/default/c1" not in rows and rows["ngram/default/c1"]["estimates"]["output_throughput"]["value"] > 0
    assert [m["verdict"] for m in document["measurements"]] == ["ERROR"]  # the speedup's test errored; no REGRESSION
