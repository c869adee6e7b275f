"""What a bisection's start sets, and how it judges a start: pure, the starts a seeded model."""

from __future__ import annotations

import random
from pathlib import Path

from pytest_specperf.bisect.differences import FIXED, SIM_ARGS, Difference, differences, placed
from pytest_specperf.bisect.runner import MOST_RUNS, BisectRunner, setup
from pytest_specperf.bisect.search import Seen
from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.measure.fingerprint import Fingerprint
from pytest_specperf.measure.records import MeasurementKey

#: what a real simulator's launch command said on the good and the bad night (its `/server_info`
#: `launch_command`, split into flags by the fingerprint): the bad night carried
#: `--sim-draft-acceptance 0.6` in the suite's `sim_args`, and `--enable-metrics` in `args`
GOOD_COMMAND = "--model-path m --speculative-algorithm EAGLE3 --speculative-num-steps 2 --sim-time-scale 0.1"
BAD_COMMAND = GOOD_COMMAND + " --enable-metrics --sim-draft-acceptance 0.6"


def fingerprint(command: str, **env: str) -> Fingerprint:
    flags = {f"server.flag {flag}": value for flag, value in _flags(command).items()}
    return Fingerprint({"model": "m", "launcher": "sim", "args": "unset"}, {**flags, **env})


def _flags(command: str) -> dict[str, str]:
    words, found = command.split(), {}
    for i, word in enumerate(words):
        if word.startswith("--"):
            value = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else "set"
            found[word] = value
    return found


def suite(**server: object) -> SpecperfConfig:
    spec = ServerConfig("eagle3", algorithm="EAGLE3", draft_model="d", num_steps=2, **server)  # type: ignore[arg-type]
    return SpecperfConfig(
        launcher="sim",
        model="m",
        sim_time_scale=0.1,
        sim_args=("--sim-draft-acceptance", "0.6", "--sim-seed", "3"),
        servers={"eagle3": spec},
    )


def test_a_simulator_flag_is_set_in_sim_args_and_a_config_keys_flag_is_not_a_candidate() -> None:
    """`--sim-draft-acceptance 0.6` in the suite's `sim_args` was listed among the differences, but a
    start edited only `args`: the good setup still carried it and ran slow. It is set in `sim_args`
    now; a flag written from a config key (`--speculative-num-steps`) is listed, never a candidate."""
    good = fingerprint(GOOD_COMMAND, NCCL_ALGO="Ring")
    bad = fingerprint(BAD_COMMAND.replace("num-steps 2", "num-steps 3"), NCCL_ALGO="Tree")
    config = suite(args=("--enable-metrics",))
    found = {d.name: d for d in placed(differences(good, bad), config, "eagle3")}
    assert found["server.flag --sim-draft-acceptance"].carrier == SIM_ARGS
    assert found["server.flag --enable-metrics"].carrier == "args"
    assert found["server.flag --speculative-num-steps"].carrier == FIXED
    assert not found["server.flag --speculative-num-steps"].applicable
    candidates = [d for d in found.values() if d.applicable]
    index = {d.name: i for i, d in enumerate(candidates)}
    good_setup, _ = setup(config, "eagle3", candidates, frozenset())
    assert "--sim-draft-acceptance" not in [*good_setup.sim_args, *good_setup.servers["eagle3"].sim_args]
    assert "--enable-metrics" not in good_setup.servers["eagle3"].args
    assert "--sim-seed" in good_setup.sim_args  # not a difference: kept
    bad_setup, variables = setup(config, "eagle3", candidates, frozenset(index.values()))
    assert bad_setup.servers["eagle3"].sim_args == ("--sim-draft-acceptance", "0.6")
    assert bad_setup.servers["eagle3"].args == ("--enable-metrics",)
    assert variables == {"NCCL_ALGO": "Tree"}


def test_a_difference_only_in_a_version_is_listed_as_a_build() -> None:
    version = Difference("sglang.version", "0.5.23", "0.5.24")
    assert not version.applicable and "--builds" in version.why_not


def runner_over(readings: list[float], *, cv: float = 0.02) -> tuple[BisectRunner, list[int]]:
    """A runner whose starts read the given levels (the good setup first), each with four rounds of
    seeded 1% noise; the list of start numbers it made comes back too."""
    config = SpecperfConfig(max_regression=0.05, run_to_run_cv=cv, servers={"plain": ServerConfig("plain")})
    rng, made = random.Random(7), []

    def start(*_: object) -> list[float]:
        made.append(len(made))
        level = readings[min(len(made) - 1, len(readings) - 1)]
        return [100.0 * level * rng.gauss(1.0, 0.01) for _ in range(4)]

    runner = BisectRunner(config, MeasurementKey("plain", "w", 1), [], Path("."), say=lambda _: None)
    runner.start_server = start
    return runner, made


def test_a_start_that_is_not_clearly_either_is_measured_again_before_it_decides() -> None:
    runner, made = runner_over([1.0, 0.93, 0.80, 0.80])
    runner.measure_good_setup()
    seen = runner.judge(frozenset())
    assert seen.bad and seen.certain  # the repeats settled it
    assert len(made) == 3 and runner.starts[-1].starts == 2


def test_a_start_that_stays_unclear_after_every_repeat_is_uncertain() -> None:
    runner, _ = runner_over([1.0, 0.93], cv=0.05)
    runner.measure_good_setup()
    seen = runner.judge(frozenset())
    assert not seen.certain and seen.bad
    assert runner.starts[-1].starts == MOST_RUNS and runner.starts[-1].verdict == "bad (uncertain)"


def test_once_reproduced_a_harmless_start_that_reads_a_little_slow_is_good() -> None:
    """On a node whose starts spread by 5%, a harmless start read 6-8% slow and, held against the 5%
    tolerance, was "not clearly either" (or bad) again and again. Once the bad setup is reproduced
    (27% slow), a start is placed between the two levels: 7% slow is clearly at the good one's."""
    runner, made = runner_over([1.0, 0.73, 0.93], cv=0.05)
    runner.found = [Difference("A", "unset", "1"), Difference("B", "unset", "1")]
    runner.measure_good_setup()
    assert runner.judge(frozenset({0, 1})).bad  # reproduced
    seen = runner.judge(frozenset({0}))
    assert seen == Seen(bad=False, certain=True)
    assert len(made) == 3  # not measured again
