"""Launch flags: SGLang's resolution rules, and refusals where SGLang would crash or silently correct."""

from __future__ import annotations

import re

import pytest

from pytest_specperf.sim.cli import SimConfigError, build_parser, parse_config

EAGLE = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d"]


def cfg(*args: str):
    return parse_config(["--model-path", "m", *args])


def test_plain_defaults():
    c = cfg()
    assert c.spec is None and c.speculative_algorithm is None
    assert c.max_running_requests == 256  # the profile's plain default
    assert (c.host, c.port, c.tp_size) == ("127.0.0.1", 30000, 1)
    assert c.sim.profile == "kimi-k2.5-tp8" and c.sim.time_scale == 1.0


def test_spec_without_max_running_requests_is_capped_at_48_with_warning():
    c = cfg(
        *EAGLE, "--speculative-num-steps", "5", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "6"
    )
    assert c.max_running_requests == 48
    assert any(level == "warning" and "48" in msg for level, msg in c.notices)
    assert cfg(*EAGLE, "--max-running-requests", "64").max_running_requests == 64


def test_auto_spec_defaults_follow_the_target_architecture():
    kimi = cfg(*EAGLE)
    assert (kimi.spec.steps, kimi.spec.topk, kimi.spec.draft_tokens) == (3, 1, 4)
    assert any("auto defaults" in msg for _, msg in kimi.notices)
    llama = cfg(*EAGLE, "--sim-profile", "llama3.1-8b-h100")
    assert (llama.spec.steps, llama.spec.topk, llama.spec.draft_tokens) == (5, 4, 8)
    standalone = cfg(
        "--speculative-algorithm",
        "STANDALONE",
        "--speculative-draft-model-path",
        "d",
        "--sim-profile",
        "llama3.1-8b-h100",
    )
    assert (standalone.spec.steps, standalone.spec.topk, standalone.spec.draft_tokens) == (3, 1, 4)


def test_nextn_resolves_to_eagle_and_drafts_with_the_target():
    c = cfg("--speculative-algorithm", "nextn")
    assert c.speculative_algorithm == "EAGLE"
    assert c.speculative_draft_model_path == "m"


def test_eagle_without_draft_drafts_with_the_target_like_nextn():
    """SGLang lets EAGLE run without a draft path on MTP-capable targets: the draft defaults to the target."""
    c = cfg("--speculative-algorithm", "EAGLE")
    assert c.speculative_algorithm == "EAGLE"
    assert c.speculative_draft_model_path == "m"
    assert (c.spec.algorithm, c.spec.steps, c.spec.topk, c.spec.draft_tokens) == ("EAGLE", 3, 1, 4)
    assert (
        cfg("--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "d").speculative_draft_model_path
        == "d"
    )


@pytest.mark.parametrize("algorithm", ["EAGLE3", "STANDALONE"])
def test_eagle3_and_standalone_still_need_a_draft_path(algorithm):
    with pytest.raises(SimConfigError, match=f"{algorithm} needs --speculative-draft-model-path"):
        cfg("--speculative-algorithm", algorithm)


def test_ngram_resolution():
    c = cfg("--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "16")
    assert (c.spec.algorithm, c.spec.topk, c.spec.draft_tokens, c.spec.steps) == ("NGRAM", 10, 16, 1)
    assert cfg("--speculative-algorithm", "NGRAM").spec.draft_tokens == 12
    with pytest.raises(SimConfigError, match="overwrites"):
        cfg("--speculative-algorithm", "NGRAM", "--speculative-eagle-topk", "4")


def test_aliases_and_unmodelled_flags():
    c = cfg(
        "--tensor-parallel-size",
        "8",
        "--attention-backend",
        "fa3",
        "--trust-remote-code",
        "--cuda-graph-bs-decode",
        "1",
        "2",
        "4",
    )
    assert c.tp_size == 8
    assert c.unmodelled_args == {
        "attention_backend": "fa3",
        "trust_remote_code": True,
        "cuda_graph_bs_decode": ["1", "2", "4"],
    }
    assert sum("not modelled by the simulator" in msg for _, msg in c.notices) == 1
    assert (
        parse_config(
            ["--model", "x", "--speculative-algorithm", "EAGLE", "--speculative-draft-model", "y"]
        ).speculative_draft_model_path
        == "y"
    )


def test_seed_defaults_to_random_seed():
    assert cfg("--random-seed", "7").sim.seed == 7
    assert cfg("--random-seed", "7", "--sim-seed", "3").sim.seed == 3


SIZES = ["--speculative-num-steps", "{s}", "--speculative-eagle-topk", "{k}", "--speculative-num-draft-tokens", "{n}"]


def sizes(s: int, k: int, n: int) -> list[str]:
    return [a.format(s=s, k=k, n=n) for a in SIZES]


REFUSALS = {
    "partial-sizes": ([*EAGLE, "--speculative-num-steps", "5"], r"all three or none.*without --speculative-eagle-topk"),
    "too-many-draft-tokens": ([*EAGLE, *sizes(2, 2, 6)], r"--speculative-num-draft-tokens 6 exceeds.*= 5"),
    "topk1-needs-steps-plus-1": ([*EAGLE, *sizes(5, 1, 4)], r"topk 1 requires .*= 6 \(got 4; SGLang silently"),
    "unknown-algorithm": (["--speculative-algorithm", "MEDUSA"], r"'MEDUSA' is unknown"),
    "unmodelled-algorithm": (["--speculative-algorithm", "DFLASH"], r"DFLASH is known to SGLang but not modelled"),
    "spec-flags-without-algorithm": (sizes(5, 1, 6), r"given without --speculative-algorithm"),
    "eagle-without-draft": (["--speculative-algorithm", "EAGLE3"], r"EAGLE3 needs --speculative-draft-model-path"),
    "lossy-on-plain": (["--sim-lossy-rate", "0.5"], r"--sim-lossy-rate needs a speculative server"),
    "bad-rate": (["--sim-error-rate", "1.5"], r"--sim-error-rate must be a share in \[0, 1\]"),
    "bad-profile": (["--sim-profile", "nope"], r"unknown simulator profile 'nope'"),
}


@pytest.mark.parametrize("args,pattern", REFUSALS.values(), ids=REFUSALS.keys())
def test_refusals_exit_2_with_one_line(run_sim_cli, args, pattern):
    res = run_sim_cli(args)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("pytest_specperf.sim: error: ")
    assert re.search(pattern, lines[0]), lines[0]


def test_removed_cuda_graph_max_bs_is_ambiguous(run_sim_cli):
    res = run_sim_cli(["--cuda-graph-max-bs", "8"])
    assert res.returncode == 2
    assert (
        "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"
    ) in res.stderr


def test_model_path_is_required(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_known_args(["--port", "1"])
    assert exc.value.code == 2
    assert "--model-path/--model" in capsys.readouterr().err


def test_draft_slowdown_scales_drafting_only() -> None:
    base = parse_config(["--model-path", "m"]).profile
    slow = parse_config(["--model-path", "m", "--sim-draft-slowdown", "4"]).profile
    before, after = base.cycle_breakdown(5, 1, 6, 1), slow.cycle_breakdown(5, 1, 6, 1)
    assert after.draft_ms == pytest.approx(4 * before.draft_ms)
    assert after.verify_ms == pytest.approx(before.verify_ms)
    assert after.total_ms - before.total_ms == pytest.approx(3 * before.draft_ms)


def test_draft_acceptance_lowers_the_accept_length_and_leaves_the_cycle() -> None:
    base = parse_config(["--model-path", "m"]).profile
    worse = parse_config(["--model-path", "m", "--sim-draft-acceptance", "0.85"]).profile
    assert worse.cycle_breakdown(5, 1, 6, 1) == base.cycle_breakdown(5, 1, 6, 1)
    before, after = base.expected_accept_length(5, 1, 6), worse.expected_accept_length(5, 1, 6)
    assert 1.0 < after < 0.95 * before


@pytest.mark.parametrize("factor", ["0", "-1", "5"])
def test_draft_acceptance_must_keep_every_rate_a_probability(factor: str) -> None:
    with pytest.raises(SimConfigError, match="--sim-draft-acceptance must be > 0 and keep every rate <= 1"):
        parse_config(["--model-path", "m", "--sim-draft-acceptance", factor])


def test_draft_slowdown_must_be_positive() -> None:
    with pytest.raises(SimConfigError, match="--sim-draft-slowdown must be > 0"):
        parse_config(["--model-path", "m", "--sim-draft-slowdown", "0"])


UNRECOGNIZED = {
    "unknown-sglang-flag": (["--no-such-flag"], "--no-such-flag"),
    "unknown-sglang-flag-with-value": (["--no-such-flag=3"], "--no-such-flag=3"),
    "misspelt-sim-flag": (["--sim-draft-slowdonw", "2"], "--sim-draft-slowdonw"),
    "unknown-sim-flag": (["--sim-nothing"], "--sim-nothing"),
}


@pytest.mark.parametrize("args,flag", UNRECOGNIZED.values(), ids=UNRECOGNIZED.keys())
def test_flags_sglang_does_not_know_exit_2_unrecognized(run_sim_cli, args, flag):
    """SGLang's argparse ends a launch with an unknown flag: a dry run must fail the same way, not on the GPU."""
    res = run_sim_cli(args)
    assert res.returncode == 2, res.stderr
    assert f"error: unrecognized arguments: {flag}" in res.stderr


def test_abbreviations_resolve_against_all_of_sglangs_flags(run_sim_cli):
    """`--tp` is `--tp-size` and `--speculative-algo` is `--speculative-algorithm`, as SGLang reads them;
    `--mo` could be six SGLang flags, so it is ambiguous even though the simulator models one of them."""
    c = cfg("--tp", "8", "--speculative-algo", "EAGLE", "--po", "31001")
    assert (c.tp_size, c.speculative_algorithm, c.port) == (8, "EAGLE", 31001)
    res = run_sim_cli(["--mo", "x"])
    assert res.returncode == 2
    assert "ambiguous option: --mo could match --model, --model-checksum" in res.stderr


def test_real_sglang_flags_the_simulator_does_not_model_are_accepted():
    c = cfg("--schedule-conservativeness", "1.3", "--enable-torch-compile", "--sidecar")
    assert c.unmodelled_args == {"schedule_conservativeness": "1.3", "enable_torch_compile": True, "sidecar": True}
