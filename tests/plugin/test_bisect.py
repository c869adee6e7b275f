"""`specperf bisect` on the simulator: the seed's story, a night that lost its NCCL tuning among ten
harmless differences, and the variable found by starting servers; bad input refused before any start;
every server stopped on SIGINT and SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_suites import ONE_MEASURED_TEST, SPEC_SERVERS, STEADY_WORKLOAD, config_text
from test_verdict import TUNED_ENV, set_in_config, verdict_suite

KEY = "eagle3-5step/default/c1"
HARMLESS = "env = { " + ", ".join(f'SGLANG_HARMLESS_{i} = "{i}"' for i in range(10)) + " }\n"


@pytest.fixture
def lost_tuning(make_suite):
    """A history whose first night had the NCCL tuning and whose last lost it among ten harmless changes."""
    suite = verdict_suite(make_suite, extra=TUNED_ENV)
    suite.run("--specperf-update").assert_outcomes(passed=1)
    set_in_config(suite, TUNED_ENV, HARMLESS)
    suite.run("--specperf-record")  # a REGRESSION, recorded as a refused run
    return suite


def bisect(suite, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pytest_specperf.cli", "bisect", *args]
    return subprocess.run(command, cwd=suite.pytester.path, capture_output=True, text=True, timeout=900, check=False)


def test_bisect_names_the_lost_nccl_variables_among_ten_harmless_differences(lost_tuning) -> None:
    """The simulator counts a server as NCCL-tuned only with all three variables: restoring the first one
    found leaves the check start bad, so the rest is searched until all three are named."""
    done = bisect(lost_tuning, KEY, "--good", "1", "--json", "bisect.json", "--run-dir", "bisect-logs")
    assert done.returncode in (0, 4), done.stdout + done.stderr  # 4: a start stayed unclear on a busy machine
    document = json.loads((lost_tuning.pytester.path / "bisect.json").read_text())
    applicable = [d for d in document["differences"] if d["applicable"]]
    assert len(applicable) == 13  # three NCCL variables, ten harmless ones
    assert document["cause_groups"] == [["NCCL_ALGO"], ["NCCL_MIN_NCHANNELS"], ["NCCL_PROTO"]], done.stdout
    assert all(cause["bad"] == "unset" for cause in document["causes"])
    assert document["outcome"] == "found"
    lines = done.stdout.splitlines()
    causes = "causes (each costs throughput on its own; restore every one): "
    assert f"{causes}NCCL_ALGO: Ring → unset; NCCL_MIN_NCHANNELS: 16 → unset; NCCL_PROTO: LL128 → unset" in lines
    assert "restore: NCCL_ALGO=Ring; NCCL_MIN_NCHANNELS=16; NCCL_PROTO=LL128" in lines
    assert any(line.startswith("  sim.nccl_tuned: true → false  (cannot be set by a start") for line in lines)
    assert lost_tuning.processes() == []


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("eagle3-5step",), "'eagle3-5step': name one key as SERVER/WORKLOAD/cN"),
        (("nosuch/default/c1", "--good", "1"), "nosuch/default/c1: the config defines servers "),
        ((KEY, "--good", "1", "--bad", "1"), "the good and the bad run are the same run (1)"),
        ((KEY, "--good", "99"), "--good 99: the history holds runs 1 to"),
        ((KEY, "--good", "1", "--store", "elsewhere"), "elsewhere: no such store directory"),
        ((KEY, "--good", "1", "--builds", "python3"), "--builds: name at least two builds, oldest first"),
        ((KEY, "--good", "1", "--builds", "nosuch-python", "python3"), "--builds: 'nosuch-python' is not an"),
    ],
)
def test_bad_input_is_refused_before_any_start(lost_tuning, args: tuple[str, ...], error: str) -> None:
    done = bisect(lost_tuning, *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert error in done.stderr
    assert "start 1" not in done.stdout


def test_the_dry_run_lists_the_differences_and_the_plan_and_starts_nothing(lost_tuning) -> None:
    done = bisect(lost_tuning, KEY, "--good", "1", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "  NCCL_ALGO: Ring → unset" in done.stdout.splitlines()
    plan = "plan: the good setup, the bad setup (not slower: not reproduced, no cause named), then at most 6 starts"
    assert plan in done.stdout
    assert "start 1" not in done.stdout


#: `specperf` as a terminal's foreground job runs it, where Ctrl-C raises KeyboardInterrupt: a shell's
#: background job (`pytest tests &`, a CI script's `cmd &`) ignores SIGINT, its children inherit that, and
#: Python then installs no handler, so the SIGINT below would be lost whatever the command does
FOREGROUND_SPECPERF = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('pytest_specperf.cli', run_name='__main__')"
)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_every_server_bisect_started(lost_tuning, stop: signal.Signals) -> None:
    command = [sys.executable, "-c", FOREGROUND_SPECPERF, "bisect", KEY, "--good", "1"]
    proc = subprocess.Popen(
        command, cwd=lost_tuning.pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the second start's server is up and measuring
            seen.append(line)
            if "eagle3-5step~2.log" in line:
                break
        proc.send_signal(stop)
        code = proc.wait(timeout=120)
        seen += proc.stdout.readlines()
        assert code == 130, "".join(seen)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert lost_tuning.processes() == [], "".join(seen)


#: a stand-in engine build: `-m sglang.launch_server ARGS` runs the simulator (slower by its EXTRA flags),
#: anything else is the interpreter itself (so the flag probe finds no SGLang and uses the shipped list)
BUILD = """#!/bin/sh
if [ "$1" = "-m" ] && [ "$2" = "sglang.launch_server" ]; then
    shift 2
    exec {python} -m pytest_specperf.sim "$@" --sim-time-scale 1.0 --sim-seed 1 {extra}
fi
exec {python} "$@"
"""


def test_bisect_finds_the_first_slow_engine_build_oldest_first(pytester: pytest.Pytester) -> None:
    """Five builds, the fourth and fifth with a draft eight times slower: the fourth is named, the third
    kept as the one to go back to, in the good setup, the newest and ⌈log₂ 3⌉ = 2 starts more (each
    repeated at most once when a busy machine leaves it unclear). The tolerance is 15%, so that a busy
    machine's scheduler cannot make a fast build look slow; the builds run at the simulator's full time
    scale, so that the modelled draft cost, not a starved CPU's overhead per token, sets the throughput
    (at time scale 0.1 and a load of 10 on 2 cores the speculative server read 1.02x the plain one, and
    the slow build -13.7% [-26.7%, +1.5%]: "as fast")."""
    builds = []
    for number in range(1, 6):
        path = pytester.path / f"build-{number}"
        extra = "--sim-draft-slowdown 8" if number >= 4 else ""
        path.write_text(BUILD.format(python=sys.executable, extra=extra))
        path.chmod(0o755)
        builds.append(str(path))
    config = config_text(
        pytester.path.name[-8:], servers=SPEC_SERVERS, workloads=STEADY_WORKLOAD, extra="max_regression = 0.15\n"
    )
    config = config.replace('launcher = "sim"', f'launcher = "sglang"\npython = "{builds[0]}"')
    pytester.makefile(".toml", specperf=config)
    pytester.makepyfile(test_suite=ONE_MEASURED_TEST)
    pytester.runpytest_subprocess("--specperf-update", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    (pytester.path / "specperf.toml").write_text(config.replace(builds[0], builds[-1]))
    pytester.runpytest_subprocess("--specperf-record", "-p", "no:cacheprovider")  # the slow night
    command = [sys.executable, "-m", "pytest_specperf.cli", "bisect", KEY, "--good", "1", "--builds", *builds]
    done = subprocess.run(
        [*command, "--json", "bisect.json"], cwd=pytester.path, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads((pytester.path / "bisect.json").read_text())
    assert document["builds"] == {"first_slow": builds[3], "last_good": builds[2]}
    ratios = {start["build"]: start["ratio"] for start in document["starts"]}
    assert ratios[builds[-1]] < 0.85 and all(r > 0.85 for b, r in ratios.items() if b in builds[:3])
    assert f"restore: python = {builds[2]!r}" in done.stdout


#: a stand-in SGLang whose next start runs at `scale` instead of 0.3 (0.15: twice as fast, 0.6: twice as
#: slow) when the file `marker` exists (then removed) and the condition `when` holds: a start that landed
#: off, as one on a busy node can. At 0.3, not 0.1, so that the modelled costs, not a starved CPU's
#: overhead per token, set the throughput: at 0.1, with four workers on 2 cores, a start of the bad setup
#: read -20.6% of the good one, "not clearly either" against a 15% tolerance, and the search named no cause
ONCE = """#!/bin/sh
if [ "$1" = "-m" ] && [ "$2" = "sglang.launch_server" ]; then
    shift 2
    scale=0.3
    if [ -e {marker} ] && {when}; then rm -f {marker}; scale={scale}; fi
    exec {python} -m pytest_specperf.sim "$@" --sim-time-scale $scale --sim-seed 1
fi
exec {python} "$@"
"""


def once_off_suite(pytester: pytest.Pytester, good_env: str, bad_env: str, *, when: str, scale: float) -> Path:
    """A suite on the `ONCE` stand-in with a stored night of `good_env` and a recorded night of
    `bad_env`; returns the marker that makes the next start (where `when` holds) land off."""
    marker = pytester.path / "off-once"
    launcher = pytester.path / "sglang-python"
    launcher.write_text(ONCE.format(python=sys.executable, marker=marker, when=when, scale=scale))
    launcher.chmod(0o755)
    config = config_text(
        pytester.path.name[-8:],
        servers=SPEC_SERVERS,
        workloads=STEADY_WORKLOAD,
        extra="rounds = 4\nmax_regression = 0.15\n" + good_env,  # 15%: a busy machine cannot fake a cause
    )
    config = config.replace('launcher = "sim"', f'launcher = "sglang"\npython = "{launcher}"')
    config = config.replace("rounds = 2\n", "")
    pytester.makefile(".toml", specperf=config)
    pytester.makepyfile(test_suite=ONE_MEASURED_TEST)
    pytester.runpytest_subprocess("--specperf-update", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    (pytester.path / "specperf.toml").write_text(config.replace(good_env, bad_env))
    pytester.runpytest_subprocess("--specperf-record", "-p", "no:cacheprovider")  # the night that lost the tuning
    marker.touch()
    return marker


def bisect_in(pytester: pytest.Pytester) -> tuple[subprocess.CompletedProcess[str], dict]:
    command = [sys.executable, "-m", "pytest_specperf.cli", "bisect", KEY, "--good", "1", "--json", "bisect.json"]
    done = subprocess.run(command, cwd=pytester.path, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode in (0, 4), done.stdout + done.stderr  # 4: a start stayed unclear on a busy machine
    return done, json.loads((pytester.path / "bisect.json").read_text())


def test_a_good_setup_start_that_was_off_is_measured_again_and_the_search_redone(pytester: pytest.Pytester) -> None:
    """The good setup's first start runs twice as fast: every start of the search reads bad against it,
    and the search, taken alone, would name the first harmless variable it tried (they sort before the
    NCCL ones). Because every start came out one way, bisect measures the good setup again, finds it
    far from its first start, and searches again against the new one: the NCCL variables are named."""
    harmless = "env = { " + ", ".join(f'CUDA_HARMLESS_{i} = "{i}"' for i in range(10)) + " }\n"
    marker = once_off_suite(pytester, TUNED_ENV, harmless, when="true", scale=0.15)
    done, document = bisect_in(pytester)
    assert not marker.exists()  # the first start was the fast one
    assert [d["name"] for d in document["differences"] if d["applicable"]][:2] == ["CUDA_HARMLESS_0", "CUDA_HARMLESS_1"]
    assert {c["name"] for c in document["causes"]} == {"NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS"}, done.stdout
    assert "searching again against this one" in done.stdout


def test_a_harmless_half_that_read_slow_once_is_not_named(pytester: pytest.Pytester) -> None:
    """The real vLLM bisection that named a harmless pair: of four differences, the start of the two
    harmless ones that sort first lands twice as slow for no cause; each of the two alone is good, so the
    search, taken alone, reported them as acting only together. Its check (the other two at their bad
    values, these at their good ones) is bad: the rest is searched, NCCL_ALGO found, the pair dropped."""
    kept = TUNED_ENV.rstrip().replace('NCCL_ALGO = "Ring", ', "").replace(" }", ", ")
    harmless = kept + 'CUDA_HARMLESS_A = "1", CUDA_HARMLESS_B = "2", SGLANG_HARMLESS = "3" }\n'
    harmless_half = '[ -n "$CUDA_HARMLESS_A" ] && [ -z "$SGLANG_HARMLESS" ]'  # not the bad setup: the half
    marker = once_off_suite(pytester, TUNED_ENV, harmless, when=harmless_half, scale=0.6)
    done, document = bisect_in(pytester)
    assert not marker.exists()  # the harmless half's start was the slow one
    applicable = [d["name"] for d in document["differences"] if d["applicable"]]
    assert applicable == ["CUDA_HARMLESS_A", "CUDA_HARMLESS_B", "NCCL_ALGO", "SGLANG_HARMLESS"]
    assert document["starts"][0]["bad_values"] == applicable  # the bad setup first: reproduced
    assert document["starts"][1]["bad_values"] == ["CUDA_HARMLESS_A", "CUDA_HARMLESS_B"]
    assert document["starts"][1]["verdict"] == "bad"
    assert [c["name"] for c in document["causes"]] == ["NCCL_ALGO"], done.stdout
    assert "cause: NCCL_ALGO: Ring → unset" in done.stdout
    assert "\nchecked: " in done.stdout  # by a start, or every other difference seen in a good one


def test_two_differences_that_only_act_together_are_reported_as_a_pair(make_suite) -> None:
    """NCCL falls back to sockets only with both NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 (either alone
    leaves a transport): among six harmless variables, sorted so that the two land in different halves,
    neither half is bad alone, and bisect reports the two together."""
    suite = verdict_suite(make_suite, extra="max_regression = 0.15\n" + TUNED_ENV)  # sockets cost about 35%
    suite.run("--specperf-update").assert_outcomes(passed=1)
    harmless = [f'CUDA_HARMLESS_{i} = "{i}"' for i in range(3)] + [f'SGLANG_HARMLESS_{i} = "{i}"' for i in range(3)]
    pair = ['NCCL_P2P_DISABLE = "1"', 'NCCL_SHM_DISABLE = "1"']
    set_in_config(suite, TUNED_ENV, TUNED_ENV.replace(" }", ", " + ", ".join(harmless + pair) + " }"))
    suite.run("--specperf-record")  # slower: NCCL over sockets
    done = bisect(suite, KEY, "--good", "1", "--json", "bisect.json")
    assert done.returncode in (0, 4), done.stdout + done.stderr
    document = json.loads((suite.pytester.path / "bisect.json").read_text())
    applicable = [d["name"] for d in document["differences"] if d["applicable"]]
    assert applicable.index("NCCL_SHM_DISABLE") == len(applicable) // 2  # the pair straddles the halves
    assert sorted(c["name"] for c in document["causes"]) == ["NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"], done.stdout
    assert "causes (only together): NCCL_P2P_DISABLE: unset → 1; NCCL_SHM_DISABLE: unset → 1" in done.stdout
    assert "restore: unset NCCL_P2P_DISABLE; unset NCCL_SHM_DISABLE" in done.stdout


def test_a_night_slowed_by_the_node_is_not_reproduced_and_no_cause_is_named(make_suite) -> None:
    """A night slowed only by the node, recorded with four harmless variable differences: bisect named
    all four "causes (only together)" and exited 0, because it never started the bad setup. It starts
    it first now: as fast as the good setup, so "not reproduced" (exit 3; 4 when a start a starved
    machine made unclear is what it rests on) and no cause. The tolerance is 30%, so that a start starved
    by a busy machine does not read as a regression."""
    suite = verdict_suite(make_suite, extra="max_regression = 0.3\n" + TUNED_ENV)
    suite.run("--specperf-update").assert_outcomes(passed=1)
    harmless = ", ".join(f'SGLANG_HARMLESS_{i} = "{i}"' for i in range(4))
    set_in_config(suite, TUNED_ENV, TUNED_ENV.replace(" }", ", " + harmless + " }"))
    suite.run("--specperf-record")  # the night (here as fast: what the node did is not in the fingerprint)
    done = bisect(suite, KEY, "--good", "1", "--bad", "2", "--json", "bisect.json")
    assert done.returncode in (3, 4), done.stdout + done.stderr
    document = json.loads((suite.pytester.path / "bisect.json").read_text())
    assert (done.returncode == 4) == bool(document["uncertain"])
    assert len([d for d in document["differences"] if d["applicable"]]) == 4
    assert document["outcome"] == "not reproduced"
    assert document["causes"] == [] and document["cause_groups"] == []
    assert "not reproduced: tonight's setup measures as fast as the good one" in done.stdout
    assert suite.processes() == []


def test_a_simulator_flag_in_sim_args_is_bisected(make_suite) -> None:
    """A difference carried by the suite's `sim_args` (the simulator's own flags) was listed but never
    applied: every start edited `args` only, so even the good setup ran slow and bisect answered that
    no difference explains it. It is set in `sim_args` now, and named."""
    suite = verdict_suite(make_suite, extra="max_regression = 0.15\n" + TUNED_ENV)
    suite.run("--specperf-update").assert_outcomes(passed=1)
    harmless = ", ".join(f'SGLANG_HARMLESS_{i} = "{i}"' for i in range(3))
    bad = TUNED_ENV.replace(" }", ", " + harmless + " }") + 'sim_args = ["--sim-draft-slowdown", "40"]\n'
    set_in_config(suite, TUNED_ENV, bad)
    suite.run("--specperf-record")  # slower: the draft forty times slower
    done = bisect(suite, KEY, "--good", "1", "--json", "bisect.json")
    assert done.returncode in (0, 4), done.stdout + done.stderr
    document = json.loads((suite.pytester.path / "bisect.json").read_text())
    carriers = {d["name"]: d["carrier"] for d in document["differences"] if d["applicable"]}
    assert carriers["server.flag --sim-draft-slowdown"] == "sim_args", carriers
    assert [c["name"] for c in document["causes"]] == ["server.flag --sim-draft-slowdown"], done.stdout
    assert "restore: no --sim-draft-slowdown" in done.stdout
