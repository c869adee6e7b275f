"""The cost model reproduces the figures of docs/story.md (expected values computed by hand in the comments)."""

from __future__ import annotations

from importlib import resources

import pytest

from pytest_specperf.sim.nccl import SOCKET_COMM_FACTOR, over_sockets
from pytest_specperf.sim.profile import (
    AcceptanceModel,
    ProfileError,
    SpecConfig,
    accepted_distribution,
    chain_mean_tokens,
    expected_cycles,
)
from pytest_specperf.sim.profile_files import available_profiles, load_profile

EAGLE_516 = SpecConfig("EAGLE3", 5, 1, 6)
EAGLE_213 = SpecConfig("EAGLE3", 2, 1, 3)


@pytest.fixture(scope="module")
def kimi():
    return load_profile("kimi-k2.5-tp8")


@pytest.fixture(scope="module")
def llama():
    return load_profile("llama3.1-8b-h100")


def test_shipped_profiles():
    assert {"kimi-k2.5-tp8", "llama3.1-8b-h100"} <= set(available_profiles())
    assert load_profile().name == "kimi-k2.5-tp8"  # the default


def test_kimi_plain_untuned_and_tuned(kimi):
    # 1000 / 62.9 = 15.9 ms; tuned: 15.9 - 15.9 x 0.4645 x 0.65 = 11.1 ms (90 tok/s)
    assert kimi.plain_step_ms(1) == pytest.approx(15.9)
    assert kimi.predicted_decode_throughput(None, 1) == pytest.approx(62.9, abs=0.05)
    assert kimi.plain_step_ms(1, tuned=True) == pytest.approx(11.1, abs=0.01)
    assert kimi.predicted_decode_throughput(None, 1, tuned=True) == pytest.approx(90.0, abs=0.2)


def test_kimi_cycle_5_steps_6_tokens(kimi):
    b = kimi.cycle_breakdown(5, 1, 6, 1)
    assert b.draft_ms == pytest.approx(0.96)  # 5 x 0.192
    assert b.verify_ms == pytest.approx(28.7, abs=0.01)  # 22.5 + 6 x 1.0333
    assert b.total_ms == pytest.approx(29.9, abs=0.01)  # + 0.24 overhead
    assert b.verify_share == pytest.approx(0.96, abs=0.01)  # "95% of the cycle"
    assert kimi.cycle_ms(5, 1, 6, 1, False) == pytest.approx(b.total_ms)
    tau = kimi.expected_accept_length(5, 1, 6)
    assert tau == pytest.approx(2.1, abs=0.05)
    assert kimi.predicted_decode_throughput(EAGLE_516, 1) == pytest.approx(71, abs=1.0)  # 2.125 / 29.9 ms


def test_kimi_cycle_2_steps_3_tokens(kimi):
    b = kimi.cycle_breakdown(2, 1, 3, 1)
    assert b.verify_ms == pytest.approx(25.6, abs=0.01)  # 22.5 + 3 x 1.0333
    assert b.total_ms == pytest.approx(26.22, abs=0.01)  # 0.384 + 25.6 + 0.24
    tau = kimi.expected_accept_length(2, 1, 3)
    assert 1.93 <= tau <= 2.30 and tau == pytest.approx(2.0, abs=0.05)
    tput = kimi.predicted_decode_throughput(EAGLE_213, 1)
    assert 75.0 <= tput <= 76.5  # story: 75.9 tok/s
    assert tput / kimi.predicted_decode_throughput(None, 1) == pytest.approx(1.20, abs=0.02)  # +20%


def test_kimi_verify_is_mostly_fixed_cost(kimi):
    # Fit cycle = a + b n over draft tokens 3 and 6 (verify only): b = 1.033 ms/token, a = 22.5 ms.
    v3, v6 = kimi.cycle_breakdown(2, 1, 3, 1).verify_ms, kimi.cycle_breakdown(5, 1, 6, 1).verify_ms
    per_token = (v6 - v3) / 3
    assert per_token == pytest.approx(1.03, abs=0.01)
    assert v3 - 3 * per_token == pytest.approx(22.5, abs=0.01)
    # The naive "linear in tokens" hypothesis (28.7 / 6 = 4.78 ms/token) would predict 14.3 ms at 3 tokens.
    assert v3 > 1.7 * 14.3
    assert kimi.cycle_breakdown(5, 1, 6, 1).fixed_share == pytest.approx(0.75, abs=0.05)


def test_kimi_nccl_tuning_cuts_verify_27_percent(kimi):
    untuned = kimi.cycle_breakdown(5, 1, 6, 1, tuned=False)
    tuned = kimi.cycle_breakdown(5, 1, 6, 1, tuned=True)
    assert 1 - tuned.verify_ms / untuned.verify_ms == pytest.approx(0.27, abs=0.01)
    assert tuned.comm_ms < untuned.comm_ms
    # The phantom baseline: untuned cycle / tuned plain step = 29.9 / 11.1 = 2.69 > tau 2.1.
    assert untuned.total_ms / kimi.plain_step_ms(1, tuned=True) == pytest.approx(2.69, abs=0.02)


@pytest.mark.parametrize("spec", [EAGLE_516, EAGLE_213], ids=["5-1-6", "2-1-3"])
def test_kimi_speedup_crossover_within_batch_64(kimi, spec):
    ratios = [
        kimi.predicted_decode_throughput(spec, b) / kimi.predicted_decode_throughput(None, b) for b in range(1, 65)
    ]
    assert ratios[0] > 1.0
    assert min(ratios) < 1.0  # verify turns compute-bound: speculation loses at large batch


def test_llama_speculation_wins_clearly(llama):
    tau = llama.expected_accept_length(5, 1, 6)
    assert 3.0 <= tau <= 4.0
    speedup = llama.predicted_decode_throughput(EAGLE_516, 1) / llama.predicted_decode_throughput(None, 1)
    assert speedup == pytest.approx(2.2, abs=0.2)


def test_llama_crossover_later_than_kimi(kimi, llama):
    def crossover(profile):
        return next(
            b
            for b in range(1, 257)
            if profile.predicted_decode_throughput(EAGLE_516, b) < profile.predicted_decode_throughput(None, b)
        )

    assert crossover(kimi) < crossover(llama) <= 64


def test_llama_has_nothing_to_tune(llama):
    assert not llama.nccl.is_tuned({"NCCL_ALGO": "Ring"})
    assert llama.plain_step_ms(1, tuned=True) == llama.plain_step_ms(1)


def test_nccl_tuning_needs_every_variable(kimi):
    full = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL128", "NCCL_MIN_NCHANNELS": "16"}
    assert kimi.nccl.is_tuned(full)
    assert not kimi.nccl.is_tuned({**full, "NCCL_PROTO": "Simple"})
    assert kimi.nccl.missing({"NCCL_ALGO": "ring"}) == ["NCCL_PROTO=LL128", "NCCL_MIN_NCHANNELS=16"]


def test_cuda_graph_penalty(kimi):
    assert kimi.plain_step_ms(4, cuda_graph_max_bs=2) == pytest.approx(kimi.plain_step_ms(4) * 1.6)
    assert kimi.cycle_ms(5, 1, 6, 4, cuda_graph_max_bs=4) == pytest.approx(kimi.cycle_ms(5, 1, 6, 4))


def test_ttft_and_request_prediction(kimi):
    assert kimi.predicted_ttft_ms(50) == pytest.approx(44.0)  # 40 + 50 x 0.08
    assert kimi.predicted_ttft_ms(50, cached_tokens=49) == pytest.approx(40.08)
    plain = kimi.predict_request(None, 50, 256)
    assert plain.e2e_ms == pytest.approx(44.0 + 255 * 15.9)
    assert plain.accept_length == 1.0
    spec = kimi.predict_request(EAGLE_516, 50, 256)
    # 255 decode tokens at ~2.125 per cycle -> ~120 cycles; N / V includes the prefill token
    assert spec.verify_steps == pytest.approx(255 / 2.125, rel=0.02)
    assert spec.accept_length == pytest.approx(256 / spec.verify_steps)
    assert kimi.predicted_round_throughput(
        EAGLE_516, concurrency=1, prompt_tokens=50, output_tokens=256
    ) == pytest.approx(spec.throughput)


def test_topk_widens_acceptance_and_caps_at_draft_tokens(kimi):
    chain = kimi.expected_accept_length(3, 1, 4)
    tree = kimi.expected_accept_length(3, 4, 8)
    assert tree > chain
    assert kimi.expected_accept_length(5, 4, 3) <= 3.0  # at most draft_tokens - 1 drafts + bonus


def test_chain_math():
    assert accepted_distribution((0.5, 0.5)) == [0.5, 0.25, 0.25]
    assert chain_mean_tokens((0.5, 0.5)) == pytest.approx(1.75)
    assert expected_cycles((), 10) == pytest.approx(10.0)  # one token per cycle
    assert expected_cycles((1.0,), 10) == pytest.approx(5.0)  # always two
    assert expected_cycles((1.0,), 3) == pytest.approx(2.0)  # the last cycle's surplus is cut
    m = AcceptanceModel((0.5,), (1.0, 1.0), 0.98)
    assert m.rates(SpecConfig("EAGLE3", 1, 1, 2), 1.0) == (0.5,)
    assert m.rates(SpecConfig("EAGLE3", 1, 2, 3), 1.0) == (pytest.approx(0.75),)  # 1 - 0.5^2


def test_ngram_depth_comes_from_draft_tokens(kimi):
    assert SpecConfig("NGRAM", 1, 10, 12).depth == 11
    assert kimi.expected_accept_length(1, 10, 12, algorithm="NGRAM") > 1.0


def test_profile_file_errors(tmp_path):
    with pytest.raises(ProfileError, match="unknown simulator profile 'nope'"):
        load_profile("nope")
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[server]\nmodel_path = 1\n')
    with pytest.raises(ProfileError, match=r"bad.toml: \[server\]"):
        load_profile(bad)
    src = (resources.files("pytest_specperf.sim") / "profiles" / "kimi-k2.5-tp8.toml").read_text()
    copy = tmp_path / "copy.toml"
    copy.write_text(src.replace("[output]", "[output]\nbogus = 1"))
    with pytest.raises(ProfileError, match=r"unknown key.*bogus"):
        load_profile(copy)
    copy.write_text(src)
    assert load_profile(str(copy)).name == "kimi-k2.5-tp8"  # a path works as well as a name


def test_nccl_falls_back_to_sockets_only_with_both_transports_disabled(kimi):
    # Kimi's plain step: 15.9 ms, 46.45% of it communication; over sockets 4x slower:
    # 15.9 x (1 + 0.4645 x 3) = 38.06 ms. Either variable alone leaves a transport: no change.
    assert not over_sockets({"NCCL_P2P_DISABLE": "1"})
    assert not over_sockets({"NCCL_SHM_DISABLE": "1", "NCCL_P2P_DISABLE": "0"})
    assert over_sockets({"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"})
    slow = kimi.slower_communication(SOCKET_COMM_FACTOR)
    assert slow.plain_step_ms(1) == pytest.approx(15.9 * (1 + 0.4645 * 3), rel=1e-3)
    # the communication share grows to 4 x 0.4645 / (1 + 3 x 0.4645) = 78.3%, and tuning still shrinks it
    assert slow.cost.plain_comm_share == pytest.approx(4 * 0.4645 / (1 + 3 * 0.4645), rel=1e-3)
    assert slow.cycle_ms(5, 1, 6, 1) > kimi.cycle_ms(5, 1, 6, 1) * 1.5
