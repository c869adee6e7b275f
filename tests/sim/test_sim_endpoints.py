"""HTTP contract of the simulator (docs/engines/sglang.md), against real simulator processes."""

from __future__ import annotations

import http.client
import itertools
import json
from pathlib import Path

import pytest

SPEC_KEYS = {
    "spec_verify_ct",
    "spec_accept_length",
    "spec_accept_rate",
    "spec_num_correct_drafts",
    "spec_num_proposed_drafts",
    "spec_correct_drafts_histogram",
}
META_KEYS = {"id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens"}


# ---- health and status ------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/health", "/health_generate", "/ready"])
def test_health_endpoints_ready(plain_sim, path):
    r = plain_sim.get(path)
    assert r.status_code == 200


def test_ready_line_and_banner_in_log(spec_sim):
    log = spec_sim.log()
    first = log.splitlines()[0]
    assert "pytest-specperf simulator" in first and "NOT a real SGLang server" in first
    assert "profile=kimi-k2.5-tp8" in first and "time_scale=0" in first and "NCCL untuned" in first
    assert "The server is fired up and ready to roll!" in log
    assert "Load weight begin" in log and "Capture cuda graph begin" in log
    assert "max_running_requests is set to 48" in log
    assert log.count("not modelled by the simulator") == 1 and "--attention-backend fa3" in log


@pytest.mark.parametrize("path", ["/model_info", "/get_model_info"])
def test_model_info(plain_sim, path):
    info = plain_sim.get(path).json()
    assert info["model_path"] == "moonshotai/Kimi-K2.5"
    assert info["is_generation"] is True
    assert info["architectures"] == ["DeepseekV3ForCausalLM"]
    for key in ("served_model_name", "tokenizer_path", "weight_version", "model_type"):
        assert key in info


def test_server_info_spec(spec_sim):
    info = spec_sim.get("/server_info").json()
    assert info["model_path"] == "moonshotai/Kimi-K2.5"
    assert info["tp_size"] == 8
    assert info["speculative_algorithm"] == "EAGLE3"
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"], info["speculative_num_draft_tokens"]) == (
        5,
        1,
        6,
    )
    assert info["speculative_draft_model_path"] == "org/kimi-k2.5-eagle3"
    assert info["max_running_requests"] == 48
    assert info["cuda_graph_max_bs_decode"] is None  # not given: SGLang resolves the limit into cuda_graph_config
    decode = info["cuda_graph_config"]["decode"]
    assert decode["max_bs"] == 128 and decode["backend"] == "full"
    assert info["mem_fraction_static"] == 0.85
    assert "--speculative-num-steps 5" in info["launch_command"]
    assert info["version"] == "0.5.23+specperf-sim"
    assert info["attention_backend"] == "fa3" and info["trust_remote_code"] is True
    assert isinstance(info["internal_states"], list) and len(info["internal_states"]) == 1
    sim = info["simulator"]
    assert sim["profile"] == "kimi-k2.5-tp8" and sim["time_scale"] == 0.0 and sim["seed"] == 0
    assert sim["nccl_tuned"] is False


def test_server_info_plain_and_alias(plain_sim):
    info = plain_sim.get("/server_info").json()
    assert info["speculative_algorithm"] is None and info["speculative_num_steps"] is None
    assert info["max_running_requests"] == 256
    old = plain_sim.get("/get_server_info").json()
    assert old["launch_command"] == info["launch_command"]
    assert "avg_spec_accept_length" not in info["internal_states"][0]
    assert "/get_server_info is deprecated" in plain_sim.log()


def test_avg_spec_accept_length_is_lifetime_and_reset_by_flush(spec_sim):
    spec_sim.post("/flush_cache")
    assert "avg_spec_accept_length" not in spec_sim.get("/server_info").json()["internal_states"][0]
    spec_sim.generate("a long answer please", max_new_tokens=200, ignore_eos=True)  # > 40 decode iterations
    state = spec_sim.get("/server_info").json()["internal_states"][0]
    assert 1.0 < state["avg_spec_accept_length"] < 6.0
    assert spec_sim.post("/flush_cache").status_code == 200
    assert "avg_spec_accept_length" not in spec_sim.get("/server_info").json()["internal_states"][0]


def test_v1_loads(spec_sim):
    loads = spec_sim.get("/v1/loads").json()
    assert loads["accelerator"] == "NVIDIA H200"
    assert loads["num_accelerators"] == 8
    assert loads["version"] == "0.5.23+specperf-sim"
    assert "timestamp" in loads
    load = loads["loads"][0]
    assert {"num_running_reqs", "num_waiting_reqs", "max_running_requests", "speculative"} <= set(load)


def test_a_cpu_server_says_so(sim_factory):
    """SGLang's CPU build reports `device: cpu` and no accelerator; so does the simulator on `--device cpu`."""
    sim = sim_factory(["--sim-time-scale", "0", "--device", "cpu", "--attention-backend", "torch_native"])
    info = sim.get("/server_info").json()
    assert info["device"] == "cpu" and info["attention_backend"] == "torch_native"
    loads = sim.get("/v1/loads").json()
    assert loads["accelerator"] is None and loads["num_accelerators"] == 1


def test_v1_models(plain_sim):
    data = plain_sim.get("/v1/models").json()
    assert data["object"] == "list" and data["data"][0]["id"] == "moonshotai/Kimi-K2.5"


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_flush_cache_clears_radix_cache(plain_sim, method):
    prompt = f"cache me if you can ({method})"
    first = plain_sim.generate(prompt)["meta_info"]
    assert first["cached_tokens"] == 0
    again = plain_sim.generate(prompt)["meta_info"]
    assert again["cached_tokens"] == again["prompt_tokens"] - 1
    r = plain_sim.session.request(method, plain_sim.url + "/flush_cache", timeout=10)
    assert r.status_code == 200 and r.text.startswith("Cache flushed")
    assert plain_sim.generate(prompt)["meta_info"]["cached_tokens"] == 0


def _counter(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(f"sglang:{name}{{"))


def test_metrics_counters(spec_sim):
    before = spec_sim.get("/metrics").text
    out = spec_sim.generate("count my tokens", max_new_tokens=30, ignore_eos=True)["meta_info"]
    after = spec_sim.get("/metrics").text
    for name in ("generation_tokens_total", "spec_verify_calls_total", "num_requests_total", "prompt_tokens_total"):
        assert f"# TYPE sglang:{name} counter" in after
    assert _counter(after, "generation_tokens_total") - _counter(before, "generation_tokens_total") == 30
    assert (
        _counter(after, "spec_verify_calls_total") - _counter(before, "spec_verify_calls_total")
        == out["spec_verify_ct"]
    )
    assert _counter(after, "num_requests_total") - _counter(before, "num_requests_total") == 1
    assert _counter(after, "prompt_tokens_total") - _counter(before, "prompt_tokens_total") == out["prompt_tokens"]


def test_metrics_needs_enable_metrics(sim_factory):
    sim = sim_factory(["--sim-time-scale", "0"])
    assert sim.get("/metrics").status_code == 404


# ---- /generate --------------------------------------------------------------------------------------
def test_generate_plain_shape(plain_sim):
    out = plain_sim.generate("Explain speculative decoding.", max_new_tokens=12, ignore_eos=True)
    assert set(out) == {"text", "output_ids", "meta_info"}
    meta = out["meta_info"]
    assert set(meta) >= META_KEYS and "e2e_latency" in meta
    assert not SPEC_KEYS & set(meta)
    assert meta["finish_reason"] == {"type": "length", "length": 12}
    assert meta["completion_tokens"] == len(out["output_ids"]) == 12
    assert meta["prompt_tokens"] == 4  # "Explain", "speculative", "decoding", "."
    assert isinstance(out["text"], str) and out["text"]


def test_generate_spec_fields(spec_sim):
    meta = spec_sim.generate("Explain speculative decoding.", max_new_tokens=64, ignore_eos=True)["meta_info"]
    assert set(meta) >= SPEC_KEYS
    v = meta["spec_verify_ct"]
    assert meta["spec_accept_length"] == pytest.approx(meta["completion_tokens"] / v)
    assert meta["spec_num_proposed_drafts"] == v * 5
    assert meta["spec_accept_rate"] == pytest.approx(meta["spec_num_correct_drafts"] / (v * 5))
    hist = meta["spec_correct_drafts_histogram"]
    assert sum(hist) == v
    assert sum(k * n for k, n in enumerate(hist)) == meta["spec_num_correct_drafts"]
    # SGLang grows the list on demand: it ends at the most drafts one verify step accepted (at most 5 here)
    assert len(hist) <= 6 and hist[-1] > 0


def test_generate_input_ids_and_put(spec_sim):
    r = spec_sim.session.put(
        spec_sim.url + "/generate",
        timeout=10,
        json={"input_ids": [1, 2, 3, 4], "sampling_params": {"max_new_tokens": 3}},
    )
    assert r.status_code == 200
    assert r.json()["meta_info"]["prompt_tokens"] == 4


def test_natural_stop_and_ignore_eos(plain_sim):
    meta = plain_sim.generate("Tell me a story", max_new_tokens=5000)["meta_info"]
    assert meta["finish_reason"] == {"type": "stop", "matched": 2}
    assert 96 <= meta["completion_tokens"] <= 480  # the profile's natural length range
    forced = plain_sim.generate("Tell me a story", max_new_tokens=600, ignore_eos=True)["meta_info"]
    assert forced["finish_reason"] == {"type": "length", "length": 600}


def test_stop_string(plain_sim):
    full = plain_sim.generate("stop strings", max_new_tokens=40, ignore_eos=True)["text"]
    word = full.split()[5].strip(",.;:")
    out = plain_sim.generate("stop strings", max_new_tokens=40, ignore_eos=True, stop=[word])
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": word}
    assert word not in out["text"] and full.startswith(out["text"])


def test_stream_plain_grows_by_whole_steps(plain_sim):
    """One event per decode step, or several steps merged into one when the writer is slower than the
    steps (SGLang's tokenizer manager keeps only its newest pending output): counts only grow."""
    chunks = plain_sim.stream(
        "/generate", {"text": "stream me", "stream": True, "sampling_params": {"max_new_tokens": 10, "temperature": 0}}
    )
    assert chunks[-1] == "[DONE]"
    opening, *data = chunks[:-1]
    assert opening["text"] == "" and opening["meta_info"]["completion_tokens"] == 0  # as real SGLang opens
    counts = [c["meta_info"]["completion_tokens"] for c in data]
    assert counts == sorted(set(counts)) and counts[-1] == 10 and counts[0] >= 1
    assert all(c["meta_info"]["finish_reason"] is None for c in data[:-1])
    assert data[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 10}
    assert "e2e_latency" in data[-1]["meta_info"] and not any("e2e_latency" in c["meta_info"] for c in data[:-1])


def test_stream_spec_cumulative_and_multi_token(spec_sim):
    chunks = spec_sim.stream(
        "/generate",
        {
            "text": "stream me please",
            "stream": True,
            "sampling_params": {"max_new_tokens": 80, "temperature": 0, "ignore_eos": True},
        },
    )
    assert chunks[-1] == "[DONE]" and "[DONE]" not in chunks[:-1]
    data = chunks[:-1]
    for prev, cur in itertools.pairwise(data):
        assert cur["text"].startswith(prev["text"])
        assert cur["output_ids"][: len(prev["output_ids"])] == prev["output_ids"]
        assert len(cur["output_ids"]) == cur["meta_info"]["completion_tokens"]
        assert set(cur["meta_info"]) >= META_KEYS
    counts = [c["meta_info"]["completion_tokens"] for c in data]
    assert counts == sorted(set(counts))  # events may merge steps, never repeat or reorder them
    final = data[-1]["meta_info"]
    assert final["completion_tokens"] == 80
    assert final["spec_verify_ct"] < 80  # one verify step can carry several tokens
    # at most one chunk per verify, plus the prefill token and the empty opening event
    assert len(data) <= final["spec_verify_ct"] + 2
    assert not any(SPEC_KEYS & set(c["meta_info"]) for c in data[:-1])  # spec_* on the final event only


def test_non_stream_equals_stream(spec_sim):
    body = {"text": "same either way", "sampling_params": {"max_new_tokens": 30, "temperature": 0}}
    full = spec_sim.post("/generate", json=body).json()
    last = spec_sim.stream("/generate", {**body, "stream": True})[-2]
    assert last["text"] == full["text"] and last["output_ids"] == full["output_ids"]


# ---- errors -----------------------------------------------------------------------------------------
BAD_BODIES = {
    "unknown-sampling-param": ({"text": "x", "sampling_params": {"max_tokens": 5}}, "unknown field `max_tokens`"),
    "list-text": ({"text": ["a", "b"]}, "batched requests"),
    "negative-max-new-tokens": ({"text": "x", "sampling_params": {"max_new_tokens": -1}}, "max_new_tokens"),
    "wrong-type": ({"text": "x", "sampling_params": {"temperature": "hot"}}, "invalid type for `temperature`"),
    "no-prompt": ({"sampling_params": {}}, "Either text or input_ids"),
    "text-not-str": ({"text": 5}, "invalid type for `text`"),
    "stream-not-bool": ({"text": "x", "stream": "yes"}, "invalid type for `stream`"),
    "not-an-object": ([1, 2], "expected a JSON object"),
}


@pytest.mark.parametrize("body,message", BAD_BODIES.values(), ids=BAD_BODIES.keys())
def test_generate_400(spec_sim, body, message):
    r = spec_sim.post("/generate", json=body)
    assert r.status_code == 400
    assert message in r.json()["error"]
    assert "Traceback" not in r.text


def test_unknown_sampling_param_lists_allowed_keys(spec_sim):
    r = spec_sim.post("/generate", json={"text": "x", "sampling_params": {"max_tokens": 5}})
    assert r.json()["error"].startswith("unknown field `max_tokens`, expected one of `max_new_tokens`")


def test_invalid_json_400_and_server_survives(spec_sim):
    r = spec_sim.post("/generate", data=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "invalid JSON" in r.json()["error"]
    assert spec_sim.get("/health_generate").status_code == 200


def test_not_found_and_wrong_method(plain_sim):
    assert plain_sim.get("/nope").status_code == 404
    assert plain_sim.get("/generate").status_code == 405


def test_keep_alive_with_http_client(spec_sim):
    """Several requests, streaming and not, on one HTTP/1.1 connection."""
    conn = http.client.HTTPConnection("127.0.0.1", spec_sim.port, timeout=10)
    try:
        body = json.dumps({"text": "keep alive", "sampling_params": {"max_new_tokens": 8}})
        for stream in (False, True, False):
            payload = json.dumps({**json.loads(body), "stream": stream})
            conn.request("POST", "/generate", payload, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read().decode()
            assert resp.status == 200
            if stream:
                assert resp.getheader("Transfer-Encoding") == "chunked"
                assert data.endswith("data: [DONE]\n\n")
            else:
                assert resp.getheader("Content-Length") == str(len(data.encode()))
        conn.request("GET", "/health")
        assert conn.getresponse().status == 200
    finally:
        conn.close()


# ---- OpenAI-compatible ------------------------------------------------------------------------------
def test_completions_non_stream(spec_sim):
    r = spec_sim.post(
        "/v1/completions",
        json={
            "model": "m",
            "prompt": "Say hi",
            "max_tokens": 12,
            "temperature": 0,
            "ignore_eos": True,
            "return_spec_tokens_details": True,
        },
    )
    out = r.json()
    assert out["object"] == "text_completion"
    assert out["choices"][0]["finish_reason"] == "length"
    assert out["usage"]["completion_tokens"] == 12
    assert out["usage"]["total_tokens"] == out["usage"]["prompt_tokens"] + 12
    details = out["sglext"]["spec_tokens_details"]
    assert details["spec_accept_length"] == pytest.approx(12 / details["spec_verify_ct"])


def test_completions_stream_matches_non_stream(spec_sim):
    body = {"prompt": "Say hi twice", "max_tokens": 20, "temperature": 0, "ignore_eos": True}
    full = spec_sim.post("/v1/completions", json=body).json()["choices"][0]["text"]
    chunks = spec_sim.stream(
        "/v1/completions",
        {**body, "stream": True, "return_spec_tokens_details": True, "stream_options": {"include_usage": True}},
    )
    assert chunks[-1] == "[DONE]"
    sglext_chunk, usage_chunk, text_chunks = chunks[-3], chunks[-2], chunks[:-3]
    assert "".join(c["choices"][0]["text"] for c in text_chunks) == full
    assert text_chunks[-1]["choices"][0]["finish_reason"] == "length"  # completions: on the last text chunk
    assert sglext_chunk["choices"] == [] and "spec_verify_ct" in sglext_chunk["sglext"]["spec_tokens_details"]
    assert usage_chunk["usage"]["completion_tokens"] == 20 and usage_chunk["choices"] == []


def test_chat_completions(spec_sim):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    out = spec_sim.post(
        "/v1/chat/completions", json={"messages": messages, "max_tokens": 10, "temperature": 0, "ignore_eos": True}
    ).json()
    assert out["object"] == "chat.completion"
    assert out["choices"][0]["message"]["role"] == "assistant"
    assert out["usage"]["completion_tokens"] == 10
    assert "sglext" not in out  # only with return_spec_tokens_details
    chunks = spec_sim.stream(
        "/v1/chat/completions",
        {
            "messages": messages,
            "max_tokens": 10,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "return_spec_tokens_details": True,
        },
    )
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1] if c["choices"])
    assert text == out["choices"][0]["message"]["content"]
    finish, block = chunks[-3], chunks[-2]  # SGLang: the finish reason, then the extension block, each on its own
    assert finish["choices"][0]["finish_reason"] == "length" and "content" not in finish["choices"][0]["delta"]
    assert block["choices"] == [] and block["sglext"]["spec_tokens_details"]["spec_num_proposed_drafts"] > 0


def test_openai_errors(spec_sim):
    r = spec_sim.post("/v1/completions", data=b'{"prompt": "x"}', headers={"Content-Type": "text/plain"})
    assert r.status_code == 400 and "Unsupported Media Type" in r.json()["message"]
    r = spec_sim.post("/v1/chat/completions", json={"messages": "hello"})
    assert r.status_code == 400 and r.json()["object"] == "error"


# ---- API key ----------------------------------------------------------------------------------------
def test_api_key(sim_factory):
    sim = sim_factory(["--sim-time-scale", "0", "--api-key", "sekrit", "--enable-metrics"])
    for path in ("/health", "/health_generate", "/ready", "/metrics"):
        assert sim.get(path).status_code == 200, path
    assert sim.get("/server_info").status_code == 401
    assert sim.get("/server_info", headers={"Authorization": "sekrit"}).status_code == 401
    assert sim.get("/server_info", headers={"Authorization": "Bearer wrong"}).status_code == 401
    r = sim.post("/generate", json={"text": "x"})
    assert r.status_code == 401 and r.json() == {"error": "Unauthorized"}
    ok = {"Authorization": "Bearer sekrit"}
    assert sim.get("/server_info", headers=ok).json()["api_key"] == "sekrit"  # in clear, as SGLang reports it
    assert (
        sim.post("/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 2}}, headers=ok).status_code
        == 200
    )
    assert sim.get("/flush_cache", headers=ok).status_code == 200


def test_chat_prompt_tokens_count_every_turn_and_the_template(spec_sim):
    """A multi-turn conversation from builtin:chat is one prompt: every turn and the template's role
    markers count as prompt tokens, and an earlier turn changes the answer as the last one does."""
    from pytest_specperf.config.workloads import load_prompts
    from pytest_specperf.sim.text import chat_prompt, tokenize

    conversation = next(p for p in load_prompts("builtin:chat", Path(".")) if p.messages and len(p.messages) >= 4)
    messages = [dict(m) for m in conversation.messages or ()]
    body = {"messages": messages, "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    out = spec_sim.post("/v1/chat/completions", json=body).json()
    content_tokens = sum(len(tokenize(m["content"])) for m in messages)
    assert out["usage"]["prompt_tokens"] == len(tokenize(chat_prompt(messages))) > content_tokens
    changed = [{**messages[0], "content": messages[0]["content"] + " Reply in French."}, *messages[1:]]
    other = spec_sim.post("/v1/chat/completions", json={**body, "messages": changed}).json()
    assert other["choices"][0]["message"]["content"] != out["choices"][0]["message"]["content"]
