"""Workloads and measurement, end to end: numbers from real rounds against the simulator.

Tolerances are derived, not guessed: accept length is bounded by the profile's easiest and
hardest prompts plus four standard errors of the per-cycle draw. Nothing here asserts a time: what
a round's wall clock shows depends on what else the machine runs, so how closely measured
throughput and cycle time follow the profile is a benchmark (benchmarks/sim_fidelity.py, figures in
docs/benchmarks.md), not a test.
"""

from __future__ import annotations

import json
import math

import pytest

from pytest_specperf.sim.profile import SpecConfig, accepted_distribution
from pytest_specperf.sim.profile_files import load_profile

PERF_WORKLOAD = """
[specperf.workloads.default]
prompts = "builtin:qa"
num_requests = 4
max_new_tokens = 48
ignore_eos = true
warmup = 1
"""


def measured_suite(make_suite, tests: str, **config: str):
    config.setdefault("workloads", PERF_WORKLOAD)
    return make_suite(tests, **config)


def accept_length_bounds(steps: int, draft_tokens: int, tokens: int, cycles: int) -> tuple[float, float]:
    """Where Σ completion / Σ verify must fall: easiest/hardest prompt ± 4 standard errors."""
    profile = load_profile("kimi-k2.5-tp8")
    model = profile.acceptance_for("EAGLE3")
    spec = SpecConfig("EAGLE3", steps, 1, draft_tokens)
    lo_d, hi_d = min(model.difficulty_points()), max(model.difficulty_points())
    low = profile.expected_accept_length(steps, 1, draft_tokens, difficulty=lo_d)
    high = profile.expected_accept_length(steps, 1, draft_tokens, difficulty=hi_d)
    dist = accepted_distribution(model.rates(spec, hi_d))
    mean = sum(k * p for k, p in enumerate(dist))
    sd = math.sqrt(sum((k - mean) ** 2 * p for k, p in enumerate(dist)))
    margin = 4 * sd / math.sqrt(cycles)
    # SGLang's completion_tokens / spec_verify_ct also counts the token that came from prefill
    return low - margin, (high + margin) * tokens / (tokens - 1)


def test_measured_numbers_agree_with_the_profile(make_suite) -> None:
    """Accept length from the requests' own counts (token-weighted and per request), within what the
    profile's acceptance model allows; a plain server reports no speculation at all."""
    suite = measured_suite(
        make_suite,
        """
        import json, pytest

        @pytest.mark.specperf(server=["plain", "eagle3-5step"])
        def test_numbers(specperf):
            m = specperf.result
            rows = [[r.accept_length, r.accept_length_per_request, r.acceptance_rate,
                     [[rec.completion_tokens, rec.verify_ct] for rec in r.records]] for r in m.rounds]
            print("NUMBERS", m.key.server, json.dumps(rows))
        """,
    )
    result = suite.run("-s")
    result.assert_outcomes(passed=2)
    found = [line[line.index("NUMBERS") :].split(" ", 2) for line in result.outlines if "NUMBERS" in line]
    numbers = {server: json.loads(rows) for _, server, rows in found}
    for tau, per_request, rate, records in numbers["plain"]:
        assert tau is None and per_request is None and rate is None  # a plain server has no spec fields
        assert all(v is None for _, v in records) and all(n == 48 for n, _ in records)
    for tau, per_request, rate, records in numbers["eagle3-5step"]:
        tokens, verify = sum(n for n, _ in records), sum(v for _, v in records)
        assert tau == pytest.approx(tokens / verify)  # token-weighted, from the requests' own meta_info
        assert per_request == pytest.approx(sum(n / v for n, v in records) / len(records))
        low, high = accept_length_bounds(5, 6, 48, verify)
        assert low <= tau <= high
        assert 0 < rate < 1  # accepted over proposed drafts


def test_token_and_request_weighted_accept_length_differ_on_mixed_lengths(make_suite) -> None:
    suite = measured_suite(
        make_suite,
        """
        import pytest

        @pytest.mark.specperf(server="eagle3-5step")
        def test_mixed(specperf):
            r = specperf.result.rounds[0]
            lengths = {rec.completion_tokens for rec in r.records}
            assert len(lengths) > 1, lengths  # natural stops give mixed lengths
            assert r.accept_length != pytest.approx(r.accept_length_per_request, abs=1e-9)
        """,
        workloads=PERF_WORKLOAD.replace("ignore_eos = true", "ignore_eos = false")
        .replace("48", "256")
        .replace("num_requests = 4", "num_requests = 8"),
    )
    suite.run().assert_outcomes(passed=1)


def test_tests_sharing_a_measurement_measure_once(make_suite, one_spec_server) -> None:
    suite = measured_suite(
        make_suite,
        """
        import pytest, requests

        @pytest.mark.specperf(server="eagle3-5step")
        def test_a(specperf): pass

        @pytest.mark.specperf(server="eagle3-5step", accept_length=(1.0, None))
        def test_b(specperf): pass

        @pytest.mark.specperf(server="eagle3-5step")
        def test_c(specperf): pass

        @pytest.mark.specperf(server="eagle3-5step")
        def test_d(specperf, specperf_server):
            metrics = requests.get(specperf_server.url + "/metrics").text
            served = [l for l in metrics.splitlines() if l.startswith("sglang:num_requests_total")]
            print("SERVED", served[0].split()[-1])
        """,
        servers=one_spec_server('args = ["--enable-metrics"]'),
    )
    result = suite.run("-s")
    result.assert_outcomes(passed=4)
    served = [float(line[line.index("SERVED") :].split()[1]) for line in result.outlines if "SERVED" in line]
    # the server's own startup warmup (as SGLang does), our warmup request, 2 rounds of 4: for all four tests
    assert served == [1 + 1 + 2 * 4]
    assert suite.starts() == ["eagle3-5step", "plain"]


def test_http_errors_are_counted_and_fail_the_test_clearly(make_suite, one_spec_server) -> None:
    suite = measured_suite(
        make_suite,
        """
        import pytest

        @pytest.mark.specperf(server="eagle3-5step")
        def test_strict(specperf):
            pass

        @pytest.mark.specperf(server="eagle3-5step", max_error_rate=0.9)
        def test_tolerant(specperf):
            assert specperf.result.error_count > 0
        """,
        servers=one_spec_server('sim_args = ["--sim-error-rate", "0.2", "--sim-seed", "3"]'),
        workloads=PERF_WORKLOAD.replace("num_requests = 4", "num_requests = 10"),
    )
    result = suite.run()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*errors: * of 20 requests failed (*%), allowed 0.0%; first error: HTTP 500*"])


@pytest.mark.parametrize(
    ("workload", "expected"),
    [
        ('prompts = "missing.jsonl"', "*missing.jsonl*"),
        ('prompts = "bad.jsonl"', "*bad.jsonl:2: 'prompt' must be a non-empty string*"),
        ('prompts = "builtin:poetry"', "*unknown builtin prompt set 'poetry'; sets: chat, code*"),
        ("num_requests = 0", "*[[]specperf.workloads.default[]] num_requests*"),
        ("concurrency = [4, 0]", "*concurrency*"),
    ],
)
def test_bad_workloads_fail_at_collection(make_suite, workload: str, expected: str) -> None:
    suite = make_suite(
        "import pytest\n\n@pytest.mark.specperf()\ndef test_x(specperf):\n    pass\n",
        workloads=f"[specperf.workloads.default]\n{workload}\n",
    )
    (suite.pytester.path / "bad.jsonl").write_text('{"prompt": "fine"}\n{"prompt": 3}\n')
    result = suite.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: pytest-specperf: {expected}"])
    assert suite.starts() == []


@pytest.mark.parametrize(
    ("marker", "expected"),
    [
        ("min_sped=1.1", "*test_x @specperf min_sped: unknown key (did you mean 'min_speedup'?)*"),
        ("min_speedup=0", "*@specperf min_speedup: must be > 0 (e.g. 1.1 for +10%), got 0"),
        ("accept_length=(3, 2)", "*@specperf accept_length: low end 3 is above high end 2*"),
        ("throughput=70", "*@specperf throughput: must be a (low, high) pair*"),
        ("server='plain', min_speedup=1.1", "*min_speedup: does not apply to the reference server 'plain'*"),
        ("server='eagle3-6step'", "*unknown server 'eagle3-6step' (did you mean 'eagle3-5step'?)*"),
        ("workload='chat'", "*unknown workload 'chat'*"),
        ("max_regression=5", "*max_regression: must be a fraction in [[]0, 1) (0.05 = 5%), got 5"),
        ("min_speedup={3: 1.1}", "*mapping key 3 is not a concurrency level*"),
        ("accept_per_position=0.6", "*@specperf accept_per_position: must be True (each position against the *"),
        (
            "accept_per_position=(0.6, 1.5)",
            "*accept_per_position: floors are shares of verify steps in [[]0, 1], got 1.5*",
        ),
        ("server='plain', accept_per_position=(0.5,)", "*accept_per_position: server 'plain' does not speculate*"),
        (
            "server='eagle3-5step', accept_per_position=(0.5,) * 6",
            "*accept_per_position: has 6 floors, but server 'eagle3-5step' drafts 5 positions (num_steps)",
        ),
    ],
)
def test_marker_errors_are_usage_errors(make_suite, marker: str, expected: str) -> None:
    suite = make_suite(f"import pytest\n\n@pytest.mark.specperf({marker})\ndef test_x(specperf):\n    pass\n")
    result = suite.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([expected])
    assert suite.starts() == []


@pytest.mark.parametrize(
    ("marker", "workload", "expected"),
    [
        ("server='plain', lossless=True", "", "*@specperf lossless: does not apply to the reference server 'plain'*"),
        ("lossless=True", "temperature = 0.7\n", "*@specperf lossless: needs temperature 0; workload 'default'*"),
    ],
)
def test_lossless_needs_a_speculative_server_at_temperature_zero(make_suite, marker, workload, expected) -> None:
    suite = make_suite(
        f"import pytest\n\n@pytest.mark.specperf({marker})\ndef test_x(specperf):\n    pass\n",
        workloads=PERF_WORKLOAD + workload,
    )
    result = suite.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([expected])


def test_a_round_that_repeats_prompts_says_so_in_terminal_and_json(make_suite) -> None:
    """Three prompts, five requests a round: two requests repeat one; the report says it, and the
    run is still stored (the repeat is the workload's, every night the same, not a disturbance)."""
    suite = make_suite(
        "import pytest\n\n@pytest.mark.specperf(server='plain')\ndef test_perf(specperf):\n    pass\n",
        servers="[specperf.servers.plain]\n",
        workloads="""
        [specperf.workloads.default]
        prompts = "small.jsonl"
        num_requests = 5
        max_new_tokens = 8
        warmup = 0
        """,
    )
    rows = [{"prompt": f"Tell me about the number {n}."} for n in (1, 2, 3)]
    (suite.pytester.path / "small.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = suite.run("--specperf-json=report.json", "--specperf-update")
    result.assert_outcomes(passed=1)
    expected = "a round repeats prompts: 5 requests from 3 distinct prompts (small.jsonl), so 2 request(s)"
    result.stdout.fnmatch_lines(["warnings:", f"*plain/default/c1: {expected}*"])
    report = json.loads((suite.pytester.path / "report.json").read_text())
    (measurement,) = report["measurements"]
    assert any(n.startswith(expected) for n in measurement["notes"]) and not measurement["warnings"]
    assert any(expected in w for w in report["warnings"])
    assert (suite.pytester.path / ".specperf" / "sim" / "plain" / "default-c1.jsonl").is_file()


def test_a_round_of_distinct_prompts_has_no_repeat_warning(make_suite) -> None:
    suite = make_suite(
        "import pytest\n\n@pytest.mark.specperf(server='plain')\ndef test_perf(specperf):\n    pass\n",
        servers="[specperf.servers.plain]\n",
        workloads="""
        [specperf.workloads.default]
        prompts = "builtin:chat"
        num_requests = 64
        max_new_tokens = 2
        concurrency = 8
        warmup = 0
        """,
    )
    result = suite.run("--specperf-json=report.json")
    result.assert_outcomes(passed=1)
    report = json.loads((suite.pytester.path / "report.json").read_text())
    assert not any("repeats prompts" in w for w in report["warnings"])


def test_acceptance_by_draft_position_agrees_with_the_engines_own_counts(make_suite) -> None:
    """SGLang reports no per-position counters, only each response's histogram of verify steps by drafts
    accepted (and its own count of accepted drafts): per-position acceptance is read from the histograms,
    and summed over positions it is exactly the engine's accepted drafts per verify step."""
    suite = measured_suite(
        make_suite,
        """
        import pytest
        from pytest_specperf.measure.records import acceptance_from_histograms

        @pytest.mark.specperf(server="eagle3-5step")
        def test_positions(specperf):
            m = specperf.result
            records = [rec for r in m.rounds for rec in r.records if rec.ok]
            per_position = m.acceptance_per_position
            assert per_position is not None and len(per_position) == 5  # one share per draft step
            assert list(per_position) == sorted(per_position, reverse=True)  # a chain: deeper is rarer
            steps = sum(rec.verify_ct for rec in records)
            assert sum(sum(rec.accept_histogram) for rec in records) == steps
            accepted = sum(rec.accepted_drafts for rec in records)  # spec_num_correct_drafts, as SGLang counts it
            assert sum(per_position) * steps == pytest.approx(accepted, abs=1e-6)
            found = acceptance_from_histograms([rec.accept_histogram for rec in records])
            assert per_position[: len(found)] == found and not any(per_position[len(found):])
        """,
    )
    result = suite.run("-s", "-v")  # acceptance by draft position is a detail: -v
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["acceptance by draft position 1, 2, *", "*eagle3-5step/default/c1: 0.* 0.* 0.* 0.* 0.*"]
    )


def test_acceptance_by_draft_position_is_checked_against_its_floors(make_suite) -> None:
    """Like vLLM's per-position acceptance test, but judged with an interval over the rounds."""
    test = (
        "import pytest\n\n@pytest.mark.specperf(server='eagle3-5step', accept_per_position={})\n"
        "def test_x(specperf):\n    pass\n"
    )
    suite = measured_suite(
        make_suite, {"test_met": test.format("(0.2, 0.05)"), "test_missed": test.format("(0.99, 0.98)")}
    )
    result = suite.run()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*accept_per_position over * rounds: position 1 0.* [[]0.*] >= 0.99 (missed); "
            "position 2 * >= 0.98 (missed): missed*"
        ]
    )
