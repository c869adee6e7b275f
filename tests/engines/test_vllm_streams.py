"""vLLM 0.32.0's real streams (captured from its CPU build, tests/engines/data/vllm-0.32.0/), replayed
byte for byte by a tiny in-process server and read by the plugin's client with the vLLM engine."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.config.workloads import Prompt, SamplingParams
from pytest_specperf.engines import EngineFlags, engine_for
from pytest_specperf.engines.vllm import VLLM
from pytest_specperf.measure.http import ServerClient

DATA = Path(__file__).parent / "data" / "vllm-0.32.0"
TEXT = Prompt("t", "The quick brown fox jumps over the lazy dog.", None, "x")
CHAT = Prompt("c", None, ({"role": "user", "content": "Explain speculative decoding in one paragraph, please!"},), "x")
SAMPLING = SamplingParams(max_new_tokens=32)


def events(name: str) -> list[bytes]:
    """The SSE events of a capture, each re-framed as the server framed it (`data: ...\\n\\n`)."""
    text = (DATA / name).read_bytes()
    return [b"data: " + e + b"\n\n" for e in re.findall(rb"^data: (.*)$", text, flags=re.M)]


def final_metrics(name: str) -> dict:
    payloads = [json.loads(e[6:]) for e in events(name) if e[6:].strip() != b"[DONE]"]
    return payloads[-1].get("metrics") or {}


@pytest.mark.parametrize("config", ["draft", "ngram", "self"])
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_accept_length_is_vllms_own(canned_server, endpoint: str, config: str) -> None:
    name = f"{endpoint}-{config}.sse"
    url = canned_server(events(name))
    prompt = TEXT if endpoint == "completions" else CHAT
    record = ServerClient(url, engine=VLLM(), model="/tmp/models/target").generate(
        prompt, SAMPLING, 0, time.perf_counter()
    )
    assert record.ok, record.error
    spec = final_metrics(name)["speculative_decoding"]
    assert record.completion_tokens == 32  # from usage, never from chunks
    assert record.num_chunks < 32 or config == "ngram"  # an accepted draft puts several tokens in one chunk
    assert (record.verify_ct, record.accepted_drafts, record.proposed_drafts) == (
        spec["num_spec_steps"],
        spec["num_accepted_draft_tokens"],
        spec["num_draft_tokens"],
    )
    assert record.accept_length == pytest.approx(spec["mean_acceptance_length"])
    assert record.accept_histogram == tuple(spec["acceptance_histogram"])  # per position, for `specperf tune`
    assert record.finish_reason == "length"


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_plain_server_has_no_speculation(canned_server, endpoint: str) -> None:
    url = canned_server(events(f"{endpoint}-plain.sse"))
    prompt = TEXT if endpoint == "completions" else CHAT
    record = ServerClient(url, engine=VLLM()).generate(prompt, SAMPLING, 0, time.perf_counter())
    assert record.ok, record.error
    assert record.verify_ct is None and record.accept_length is None
    assert record.completion_tokens == 32


def test_greedy_outputs_equal_across_configs(canned_server) -> None:
    hashes = set()
    for config in ("plain", "draft", "ngram", "self"):
        url = canned_server(events(f"completions-{config}.sse"))
        hashes.add(ServerClient(url, engine=VLLM()).generate(TEXT, SAMPLING, 0, time.perf_counter()).output_hash)
    assert len(hashes) == 1


def test_engine_death_mid_stream_is_a_failed_request(canned_server) -> None:
    body = (DATA / "completions-enginedead.http").read_bytes().split(b"\r\n\r\n", 1)[1]
    url = canned_server([b"data: " + e + b"\n\n" for e in re.findall(rb"^data: (.*)$", body, flags=re.M)])
    record = ServerClient(url, engine=VLLM()).generate(TEXT, SAMPLING, 0, time.perf_counter())
    assert not record.ok and "server error mid-stream" in (record.error or "")


def test_requests_name_the_model_and_ask_for_usage() -> None:
    request = VLLM().request(CHAT, SAMPLING, "/m")
    assert request.path == "/v1/chat/completions" and request.mode == "chat"
    assert request.payload["model"] == "/m" and request.payload["stream_options"] == {"include_usage": True}
    assert VLLM().request(TEXT, SAMPLING, None).payload["prompt"] == TEXT.text


def test_launch_args_map_the_portable_keys() -> None:
    has_it = {"version": "0.32.0", "actions": [{"options": ["--per-request-spec-decode-metrics"]}]}  # as 0.32.0
    config = SpecperfConfig(
        engine="vllm", launcher="vllm", model="/m", engine_flags={"vllm": EngineFlags.from_probe("vllm", has_it)}
    )
    server = ServerConfig("d", algorithm="STANDALONE", draft_model="/d", num_steps=3, eagle_topk=1, num_draft_tokens=4)
    args = engine_for("vllm").launch_args(server, config, 8000, 1)
    spec = json.loads(args[args.index("--speculative-config") + 1])
    assert spec == {"method": "draft_model", "model": "/d", "num_speculative_tokens": 3}
    assert args[args.index("--per-request-spec-decode-metrics") + 1] == "summary"
    plain = engine_for("vllm").launch_args(ServerConfig("p"), config, 8000, 1)
    assert "--per-request-spec-decode-metrics" not in plain  # a startup error without speculation
    assert plain[:2] == ["--model", "/m"]


def test_a_raw_speculative_config_passes_verbatim() -> None:
    raw = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    server = ServerConfig("n", speculative_config=raw)
    args = engine_for("vllm").launch_args(server, SpecperfConfig(engine="vllm", model="/m"), 8000, 1)
    assert json.loads(args[args.index("--speculative-config") + 1]) == raw
