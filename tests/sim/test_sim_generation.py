"""Generation semantics: lossless speculation, determinism, sampling randomness, batching."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

PROMPTS = [f"Prompt number {i}: explain topic {i * 7} in detail." for i in range(8)]


def _outputs(sim, prompts, **sampling):
    return [sim.generate(p, **sampling) for p in prompts]


def test_lossless_plain_equals_spec_at_temperature_0(plain_sim, spec_sim):
    for max_new in (1, 37, 400):
        plain = _outputs(plain_sim, PROMPTS, max_new_tokens=max_new)
        spec = _outputs(spec_sim, PROMPTS, max_new_tokens=max_new)
        for a, b in zip(plain, spec, strict=True):
            assert a["output_ids"] == b["output_ids"]
            assert a["text"] == b["text"]
            assert a["meta_info"]["finish_reason"] == b["meta_info"]["finish_reason"]


def test_deterministic_for_a_seed(sim_factory, spec_args):
    def run(seed: int) -> list:
        sim = sim_factory(["--sim-time-scale", "0", "--sim-seed", str(seed), *spec_args])
        metas = [o["meta_info"] for o in _outputs(sim, PROMPTS, max_new_tokens=64, ignore_eos=True)]
        sim.stop()
        return [(m["spec_verify_ct"], m["spec_correct_drafts_histogram"]) for m in metas]

    first, again, other = run(1), run(1), run(2)
    assert first == again
    assert first != other


def test_acceptance_does_not_depend_on_concurrency(spec_sim):
    body = {"sampling_params": {"max_new_tokens": 48, "temperature": 0, "ignore_eos": True}}
    sequential = [spec_sim.post("/generate", json={**body, "text": p}).json() for p in PROMPTS]
    with ThreadPoolExecutor(8) as pool:
        concurrent = list(pool.map(lambda p: spec_sim.post("/generate", json={**body, "text": p}).json(), PROMPTS))
    for a, b in zip(sequential, concurrent, strict=True):
        assert a["output_ids"] == b["output_ids"]
        assert a["meta_info"]["spec_verify_ct"] == b["meta_info"]["spec_verify_ct"]


def test_temperature_above_0_is_random(plain_sim, deterministic_sim):
    texts = {plain_sim.generate("random please", max_new_tokens=20, temperature=0.8)["text"] for _ in range(3)}
    assert len(texts) == 3
    ignored = {  # SGLang ignores sampling_seed unless it runs deterministic inference
        plain_sim.generate("random please", max_new_tokens=20, temperature=0.8, sampling_seed=5)["text"]
        for _ in range(3)
    }
    assert len(ignored) == 3
    seeded = {
        deterministic_sim.generate("random please", max_new_tokens=20, temperature=0.8, sampling_seed=5)["text"]
        for _ in range(2)
    }
    assert len(seeded) == 1


def test_sampling_seed_is_per_prompt_and_not_the_greedy_draw(deterministic_sim):
    """One workload seed is sent with every request: reproducible per prompt, but not one shared draw."""
    plain_sim = deterministic_sim
    seeded = [plain_sim.generate(p, max_new_tokens=20, temperature=0.8, sampling_seed=0)["text"] for p in PROMPTS]
    assert len(set(seeded)) == len(PROMPTS)
    assert seeded == [
        plain_sim.generate(p, max_new_tokens=20, temperature=0.8, sampling_seed=0)["text"] for p in PROMPTS
    ]
    greedy = [plain_sim.generate(p, max_new_tokens=20)["text"] for p in PROMPTS]
    assert seeded != greedy
    other = [plain_sim.generate(p, max_new_tokens=20, temperature=0.8, sampling_seed=1)["text"] for p in PROMPTS]
    assert other != seeded


def test_chat_seed_is_the_sampling_seed(deterministic_sim):
    """SGLang's ChatCompletionRequest forwards OpenAI's `seed` as `sampling_seed`."""
    plain_sim = deterministic_sim
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 20, "temperature": 0.8, "seed": 7}
    texts = {plain_sim.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"] for _ in "ab"}
    assert len(texts) == 1


def test_output_retokenizes_to_completion_tokens(plain_sim):
    from pytest_specperf.sim.text import tokenize

    out = plain_sim.generate("count me", max_new_tokens=50, ignore_eos=True)
    assert len(tokenize(out["text"])) == out["meta_info"]["completion_tokens"] == 50


def test_queueing_beyond_max_running_requests(sim_factory):
    sim = sim_factory(["--sim-time-scale", "0.05", "--max-running-requests", "1", "--enable-metrics"])
    body = {"sampling_params": {"max_new_tokens": 100, "temperature": 0, "ignore_eos": True}}
    with ThreadPoolExecutor(3) as pool:
        outs = list(pool.map(lambda i: sim.post("/generate", json={**body, "text": f"q{i}"}).json(), range(3)))
    one_request = (40.0 + 0.08 * 2 + 99 * 15.9) * 0.05 / 1000  # prefill + 99 decode steps, scaled: ~80 ms
    waits = sorted(o["meta_info"]["queue_time"] for o in outs)
    assert waits[-1] > 0.8 * one_request  # with room for one, the others waited for a whole request


def test_debug_log_has_per_request_summaries(sim_factory):
    sim = sim_factory(["--sim-time-scale", "0", "--log-level", "debug"])
    meta = sim.generate("log me", max_new_tokens=3)["meta_info"]
    assert f"Finish: rid={meta['id']}, prompt_tokens=2" in sim.log()
    quiet = sim_factory(["--sim-time-scale", "0", "--log-level", "warning"])
    quiet.generate("log me", max_new_tokens=3)
    assert "Finish: rid=" not in quiet.log() and "ready to roll" not in quiet.log()


def test_client_disconnect_aborts_the_request(sim_factory):
    sim = sim_factory(["--sim-time-scale", "0.05"])
    body = {"text": "endless", "stream": True, "sampling_params": {"max_new_tokens": 20000, "ignore_eos": True}}
    with sim.session.post(sim.url + "/generate", json=body, stream=True, timeout=10) as r:
        lines = r.iter_lines()
        assert next(lines).startswith(b"data: ")
    # 20000 tokens would take ~16 s; the flush (only possible when idle) succeeds once the abort lands.
    assert sim.post("/flush_cache", params={"timeout": 5}).status_code == 200
    assert sim.get("/v1/loads").json()["loads"][0]["num_running_reqs"] == 0


def test_many_concurrent_streams_queue_beyond_48(spec_sim):
    body = {"stream": True, "sampling_params": {"max_new_tokens": 24, "temperature": 0, "ignore_eos": True}}
    with ThreadPoolExecutor(64) as pool:
        results = list(pool.map(lambda i: spec_sim.stream("/generate", {**body, "text": f"c{i}"}), range(64)))
    assert all(r[-1] == "[DONE]" and r[-2]["meta_info"]["completion_tokens"] == 24 for r in results)
