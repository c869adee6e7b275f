"""The SGLang client and load driver against a real simulator process over HTTP."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence

import pytest
from simharness import TENTH_TIME, Sim

from pytest_specperf.common.transport import probe
from pytest_specperf.config.workloads import Prompt, SamplingParams
from pytest_specperf.errors import ServerError
from pytest_specperf.measure.http import ServerClient
from pytest_specperf.measure.load import RoundResult, run_requests
from pytest_specperf.measure.records import RequestRecord

TEXT = Prompt("t1", "Explain why the sky is blue in two sentences.", None, "qa")
CHAT = Prompt("c1", None, ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}), "chat")
FIXED = SamplingParams(max_new_tokens=48, ignore_eos=True)


def prompts(n: int) -> list[Prompt]:
    return [Prompt(f"p{i}", f"Prompt number {i}: tell me something about the number {i}.", None, "x") for i in range(n)]


def check_sane(record: RequestRecord, tokens: int) -> None:
    assert record.ok, record.error
    assert record.completion_tokens == tokens
    assert record.prompt_tokens > 0
    assert record.finish_reason == "length"
    assert record.output_hash and len(record.output_hash) == 64
    assert record.ttft is not None and record.e2e is not None
    assert 0 < record.ttft < record.e2e
    assert 1 <= record.num_chunks <= tokens
    assert len(record.chunk_gaps) == record.num_chunks - 1
    assert all(g >= 0 for g in record.chunk_gaps)
    assert record.last_chunk is not None and record.first_chunk is not None
    # the gaps span the content chunks; the last chunk may be the finish chunk after them (it ends E2E),
    # which a busy machine delivers a few ms later: never before the last content chunk
    assert sum(record.chunk_gaps) <= record.last_chunk - record.first_chunk + 1e-9


def test_text_prompt_on_spec_server(spec_sim: Sim) -> None:
    start = time.perf_counter()
    record = spec_sim.client().generate(TEXT, FIXED, 3, start)
    check_sane(record, 48)
    assert record.index == 3 and record.sent >= 0
    assert record.verify_ct is not None and 0 < record.verify_ct <= 48
    assert record.num_chunks <= record.verify_ct + 1  # one chunk per verify step (+ the prefill token)
    assert record.proposed_drafts == record.verify_ct * 5
    assert record.accepted_drafts is not None and 0 <= record.accepted_drafts <= record.proposed_drafts
    assert record.accept_length is not None and record.accept_length >= 1


def test_chat_prompt_on_spec_server(spec_sim: Sim) -> None:
    record = spec_sim.client().generate(CHAT, FIXED, 0, time.perf_counter())
    check_sane(record, 48)
    assert record.verify_ct is not None and record.verify_ct > 0
    assert record.proposed_drafts == record.verify_ct * 5


def test_plain_server_has_no_verify_counts(plain_sim: Sim) -> None:
    client = plain_sim.client()
    for prompt in (TEXT, CHAT):
        record = client.generate(prompt, FIXED, 0, time.perf_counter())
        check_sane(record, 48)
        assert record.verify_ct is None and record.accepted_drafts is None and record.accept_length is None


def test_same_prompt_same_output_at_temperature_zero(plain_sim: Sim) -> None:
    client = plain_sim.client()
    first = client.generate(TEXT, FIXED, 0, time.perf_counter())
    second = client.generate(TEXT, FIXED, 1, time.perf_counter())
    assert first.output_hash == second.output_hash


def test_http_error_becomes_error_record(plain_sim: Sim) -> None:
    record = plain_sim.client().generate(TEXT, SamplingParams(max_new_tokens=-1), 0, time.perf_counter())
    assert not record.ok and record.error is not None and "HTTP 400" in record.error
    assert record.completion_tokens == 0


def test_timeout_becomes_error_record(spec_sim: Sim) -> None:
    client = spec_sim.client(request_timeout=0.05)
    record = client.generate(TEXT, SamplingParams(max_new_tokens=4000, ignore_eos=True), 0, time.perf_counter())
    assert record.error == "timeout: no complete answer within 0.05 s"
    assert record.completion_tokens == 0  # an error never adds throughput


def test_control_endpoints(spec_sim: Sim, plain_sim: Sim) -> None:
    client = spec_sim.client()
    assert probe(spec_sim.url, "/ready", 5) and probe(spec_sim.url, "/health_generate", 30)
    assert client.flush_cache(timeout=10)
    info = client.server_info()
    assert info["speculative_num_draft_tokens"] == 6 and "version" in info
    loads = client.loads()
    assert loads is None or "loads" in loads
    metrics = client.metrics_text()
    assert metrics is not None and "sglang:generation_tokens_total" in metrics
    assert plain_sim.client().metrics_text() is None


def test_unreachable_server() -> None:
    client = ServerClient("http://127.0.0.1:9", request_timeout=2)
    assert not probe(client.base_url, "/ready", 1) and not probe(client.base_url, "/health_generate", 1)
    record = client.generate(TEXT, FIXED, 0, time.perf_counter())
    assert record.error is not None and "refused" in record.error
    with pytest.raises(ServerError):
        client.server_info()


# ---------------------------------------------------------------------------------------------
# API key


def test_api_key_sent_and_never_leaked(sim_factory: Callable[..., Sim]) -> None:
    secret = "sk-test-0123456789abcdef"
    server = sim_factory([*TENTH_TIME], api_key=secret)
    good = server.client().generate(TEXT, FIXED, 0, time.perf_counter())
    check_sane(good, 48)
    assert server.client().server_info()

    wrong_key = "sk-wrong-9876543210fedcba"
    wrong = server.client(api_key=wrong_key)
    for prompt in (TEXT, CHAT):
        record = wrong.generate(prompt, FIXED, 0, time.perf_counter())
        assert record.error is not None and "401" in record.error
        assert wrong_key not in record.error and secret not in record.error
    with pytest.raises(ServerError) as info:
        wrong.server_info()
    assert wrong_key not in str(info.value)
    assert wrong_key not in repr(wrong)
    assert probe(server.url, "/ready", 5)  # /ready needs no key

    anonymous = ServerClient(server.url)
    assert anonymous.generate(TEXT, FIXED, 0, time.perf_counter()).error is not None


# ---------------------------------------------------------------------------------------------
# faults


def test_error_rate_gives_error_records(sim_factory: Callable[..., Sim]) -> None:
    server = sim_factory([*TENTH_TIME, "--sim-error-rate", "0.5", "--sim-seed", "3"])
    mixed = [TEXT if i % 2 else CHAT for i in range(24)]
    result = run_requests(server.client(), mixed, SamplingParams(max_new_tokens=8), concurrency=4)
    errors = [r for r in result.records if not r.ok]
    assert 0 < len(errors) < len(mixed)
    assert all(r.error for r in errors) and all(r.completion_tokens == 0 for r in errors)
    assert all(r.completion_tokens == 8 for r in result.records if r.ok)


def test_server_exit_gives_error_records(sim_factory: Callable[..., Sim]) -> None:
    server = sim_factory([*TENTH_TIME, "--sim-exit-after-requests", "3"])
    result = run_requests(server.client(request_timeout=10), prompts(8), FIXED, concurrency=2)
    assert len(result.records) == 8
    assert sum(not r.ok for r in result.records) >= 4
    assert server.proc.wait(timeout=10) is not None


def test_server_killed_mid_stream(sim_factory: Callable[..., Sim]) -> None:
    server = sim_factory(["--sim-time-scale", "1.0"])
    client = server.client(request_timeout=20)
    long = SamplingParams(max_new_tokens=4000, ignore_eos=True)
    results: list[RoundResult] = []
    worker = threading.Thread(target=lambda: results.append(run_requests(client, prompts(3), long, concurrency=3)))
    worker.start()
    deadline = time.monotonic() + 10
    while not _running_requests(client) and time.monotonic() < deadline:
        time.sleep(0.01)  # poll interval while waiting for requests to be in flight
    server.proc.kill()
    worker.join(timeout=20)
    assert not worker.is_alive()
    records = results[0].records
    assert all(not r.ok for r in records)
    assert all("disconnect" in (r.error or "") for r in records), [r.error for r in records]


def _running_requests(client: ServerClient) -> bool:
    loads = client.loads() or {}
    return any(entry.get("num_running_reqs", 0) > 0 for entry in loads.get("loads", []))


# ---------------------------------------------------------------------------------------------
# load driver


def max_overlap(records: Sequence[RequestRecord]) -> int:
    """Largest number of requests in flight at one moment, from [sent, last_chunk] intervals."""
    events = sorted([(r.sent, 1) for r in records] + [(r.last_chunk or r.sent, -1) for r in records])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def test_closed_loop_overlaps_requests(plain_sim: Sim) -> None:
    client = plain_sim.client()
    seen: list[int] = []
    result = run_requests(client, prompts(16), FIXED, concurrency=4, on_record=lambda r: seen.append(r.index))
    assert [r.index for r in result.records] == list(range(16))
    assert sorted(seen) == list(range(16))
    assert all(r.ok for r in result.records)
    assert max_overlap(result.records) == 4
    serial = run_requests(client, prompts(4), FIXED, concurrency=1)
    assert max_overlap(serial.records) == 1
    assert min(r.sent for r in result.records) >= 0
    assert max(r.last_chunk or 0 for r in result.records) <= result.duration


def test_open_loop_follows_seeded_poisson_schedule(plain_sim: Sim) -> None:
    """Requests leave on the seeded Poisson schedule, never before their time. How late they may leave
    depends on what else the machine runs: that is a benchmark (benchmarks/client_overhead.py, send
    lateness), not a test."""
    rate, n, seed = 25.0, 30, 11
    result = run_requests(
        plain_sim.client(), prompts(n), SamplingParams(max_new_tokens=4), concurrency=32, request_rate=rate, seed=seed
    )
    assert all(r.ok for r in result.records)
    rng = random.Random(seed)
    expected, t = [], 0.0
    for _ in range(n):
        expected.append(t)
        t += rng.expovariate(rate)
    sent = [r.sent for r in sorted(result.records, key=lambda r: r.index)]
    lateness = [s - e for s, e in zip(sent, expected, strict=True)]
    assert min(lateness) > -0.005, lateness  # none early
    assert sent == sorted(sent)  # in the schedule's order


def test_open_loop_respects_concurrency_cap(plain_sim: Sim) -> None:
    result = run_requests(plain_sim.client(), prompts(12), FIXED, concurrency=2, request_rate=1000.0)
    assert all(r.ok for r in result.records)
    assert max_overlap(result.records) <= 2


def test_callback_failure_is_raised_in_caller(plain_sim: Sim) -> None:
    def explode(record: RequestRecord) -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError):
        run_requests(plain_sim.client(), prompts(4), FIXED, concurrency=2, on_record=explode)


def test_flush_cache_waits_until_idle(sim_factory: Callable[..., Sim]) -> None:
    server = sim_factory([*TENTH_TIME])
    client = server.client()
    records: list[RequestRecord] = []
    long = SamplingParams(max_new_tokens=300, ignore_eos=True)
    worker = threading.Thread(target=lambda: records.append(client.generate(TEXT, long, 0, time.perf_counter())))
    worker.start()
    deadline = time.monotonic() + 10
    while not _running_requests(client) and time.monotonic() < deadline:
        time.sleep(0.01)  # poll interval while waiting for the request to be in flight
    assert not client.flush_cache(timeout=0.01)  # SGLang refuses to flush while a request runs
    assert client.flush_cache(timeout=20)
    worker.join(timeout=20)
    assert records and records[0].ok


def test_credentials_in_a_server_url_stay_out_of_messages() -> None:
    client = ServerClient("http://alice:pw-s3cret@127.0.0.1:9/v1?token=tok-abc", request_timeout=2)
    with pytest.raises(ServerError) as info:
        client.server_info()
    shown = [str(info.value), repr(client), client.generate(TEXT, FIXED, 0, time.perf_counter()).error or ""]
    for text in shown:
        assert "pw-s3cret" not in text and "tok-abc" not in text, text
    assert "127.0.0.1:9" in str(info.value)
