"""`specperf bisect SERVER/WORKLOAD/cN [--good RUN] [--bad RUN]`: find the difference that made a key slower.

The good and the bad run are two runs of the key's stored history (by default the last run before
the change in force, and the newest). Every difference between their fingerprints is listed; those
a start can set (environment variables; launch flags, in `args` or the simulator's `sim_args`) are
bisected: the good setup is measured on this node first (if it is slow too, no difference explains
the regression: the node, the driver, the hardware), then the bad setup (as fast: not reproduced, no
cause named), then one start per level of a binary search. Everything wrong with the input is
refused before any server starts.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from pytest_specperf.bisect.differences import Difference, differences, placed
from pytest_specperf.bisect.runner import BisectRunner, Start
from pytest_specperf.bisect.search import (
    FOUND,
    NOT_REPRODUCED,
    TOO_NOISY,
    UNEXPLAINED,
    Answer,
    bisect,
    first_bad,
    most_starts,
)
from pytest_specperf.cli.accept import in_force_run, run_name, selected, since_run
from pytest_specperf.cli.common import OK, opened_store
from pytest_specperf.cli.setup import Output, Setup, StoreArgument, Suite
from pytest_specperf.common.interrupts import sigterm_as_interrupt
from pytest_specperf.common.jsonfile import atomic_write
from pytest_specperf.config.loading import apply_overrides, find_config_file
from pytest_specperf.config.settings import SpecperfConfig
from pytest_specperf.engines.suite import check_launcher, load_suite
from pytest_specperf.errors import SpecperfError
from pytest_specperf.measure.records import MeasurementKey
from pytest_specperf.servers.launch import check_command_templates
from pytest_specperf.store.records import StoredBaseline
from pytest_specperf.verdict.checks import Limits
from pytest_specperf.verdict.history import speedup_estimate
from pytest_specperf.verdict.stats import Decision, Direction, Tolerance, decide_threshold

NOT_EXPLAINED, NOT_REPRODUCED_EXIT, UNCERTAIN, INTERRUPTED = 1, 3, 4, 130
EXITS = """exit codes:
  0  a cause named, every start it rests on clear (builds: the first slow build named)
  1  no difference explains it: the good setup is slow on this node too, no difference or pair of them
     is confidently the cause, or the good setup moved too much between its starts to bisect
  2  usage error, or bad input (an unknown key, runs of different servers, no difference a start can
     set, the same run twice), always before any server starts
  3  not reproduced: tonight's bad setup measures as fast as the good one (the night was the node or noise)
  4  a cause named, or not reproduced, but the answer rests on a start that stayed uncertain after three starts
  130  interrupted (every server bisect started is stopped)"""


def run_arguments(parser: argparse.ArgumentParser) -> None:
    """The key and its two runs."""
    parser.add_argument("key", metavar="SERVER/WORKLOAD/cN", help="the key whose runs to compare")
    parser.add_argument(
        "--good",
        metavar="RUN",
        help="the good run: its number, date or commit (default: the last run before the change in force)",
    )
    parser.add_argument("--bad", metavar="RUN", help="the bad run (default: the newest)")


def plan_arguments(parser: argparse.ArgumentParser) -> None:
    """What to bisect, and whether to start anything."""
    parser.add_argument("--dry-run", action="store_true", help="print the differences and the plan; start nothing")
    parser.add_argument(
        "--builds",
        nargs="+",
        metavar="PYTHON",
        help="engine builds to bisect instead of the differences: interpreters (or their environments' "
        "bin/python), oldest first; the oldest is taken as good, the first slow one is found",
    )


def run_bisect(args: argparse.Namespace) -> int:
    config = _config(args)
    builds = _builds(args.builds)
    key, good, bad, found = _plan_inputs(args, config, builds=bool(builds))
    applicable = [d for d in found if d.applicable]
    print(f"bisect {key.label}: good run {good[0] + 1} ({good[1]}), bad run {bad[0] + 1} ({bad[1]})")
    for d in found:
        print(f"  {d}" + ("" if d.applicable or builds else f"  ({d.why_not}: listed, not tried)"))
    if builds:
        print(
            f"plan: the good setup on the oldest build, the newest build, then at most "
            f"{max(0, (len(builds) - 2).bit_length())} starts to find the first slow one among {len(builds)} builds"
        )
    else:
        print(
            f"plan: the good setup, the bad setup (not slower: not reproduced, no cause named), then at most "
            f"{most_starts(len(applicable)) - 1} starts for one cause among {len(applicable)} applicable differences, "
            "the answer's check included (a start that is not clearly good or bad is measured again; when every "
            "start comes out one way, the good setup is measured again)"
        )
    if args.dry_run:
        return OK
    check_command_templates(config)
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="specperf-bisect-"))
    print(f"server logs: {run_dir}", flush=True)
    runner = BisectRunner(config, key, [] if builds else applicable, run_dir, say=lambda line: print(line, flush=True))
    try:
        with sigterm_as_interrupt():
            result = _bisect_builds(runner, builds, good[2], config) if builds else _bisect(runner, good[2], config)
    except KeyboardInterrupt:
        print("specperf bisect: interrupted; every server it started is stopped", file=sys.stderr, flush=True)
        return INTERRUPTED
    for line in result["lines"]:
        print(line)
    if args.json is not None:
        atomic_write(args.json, json.dumps(_document(key, good, bad, found, runner, result), indent=2))
        print(f"wrote {args.json}")
    return _exit_code(result)


def _exit_code(result: dict[str, Any]) -> int:
    if result.get("builds"):
        return OK
    answered = result.get("outcome") == NOT_REPRODUCED or (result.get("outcome") == FOUND and result["causes"])
    if answered and result.get("uncertain"):
        return UNCERTAIN  # "not reproduced" or a cause, either resting on a start that stayed unclear
    if result.get("outcome") == NOT_REPRODUCED:
        return NOT_REPRODUCED_EXIT
    if answered:
        return OK
    return NOT_EXPLAINED


SETUP = Setup(
    run_bisect,
    [run_arguments, StoreArgument(), Suite(), plan_arguments, Output("write the result as JSON")],
    description=__doc__.split("\n\n")[1],
    epilog=EXITS,
)


def _config(args: argparse.Namespace) -> SpecperfConfig:
    found = find_config_file(Path.cwd(), args.config)
    if found is None:
        raise SpecperfError(
            "specperf bisect: no specperf.toml (or [tool.specperf] in pyproject.toml) here; use --config"
        )
    config = apply_overrides(load_suite(*found), launcher=args.launcher, sim_time_scale=args.sim_time_scale)
    if args.launcher is not None:
        check_launcher(config, "--launcher")
    return config


def _builds(given: list[str] | None) -> list[str]:
    """The engine builds to bisect, each an interpreter that exists here (none: bisect the differences)."""
    if not given:
        return []
    if len(given) < 2:
        raise SpecperfError("--builds: name at least two builds, oldest first (the oldest good, the newest bad)")
    for build in given:
        found = shutil.which(build)
        if found is None:
            raise SpecperfError(f"--builds: {build!r} is not an interpreter here (no such executable)")
    if len(set(given)) < len(given):
        raise SpecperfError("--builds: a build is named twice")
    return list(given)


def _plan_inputs(
    args: argparse.Namespace, config: SpecperfConfig, *, builds: bool = False
) -> tuple[MeasurementKey, tuple[int, str, Any], tuple[int, str, Any], list[Difference]]:
    """The key, the two runs (index, name, measurement) and their differences; every bad input refused.
    With `builds` the differences are listed, not bisected: none need be applicable."""
    parts = args.key.strip("/").split("/")
    if len(parts) != 3 or not parts[2].startswith("c") or not parts[2][1:].isdigit():
        raise SpecperfError(f"{args.key!r}: name one key as SERVER/WORKLOAD/cN (e.g. eagle3/chat/c1)")
    key = MeasurementKey(parts[0], parts[1], int(parts[2][1:]))
    if key.server not in config.servers or key.workload not in config.workloads:
        servers, workloads = ", ".join(sorted(config.servers)), ", ".join(sorted(config.workloads))
        raise SpecperfError(f"{key.label}: the config defines servers {servers} and workloads {workloads}")
    with opened_store(args.store) as store:
        matching = [e for e in selected(store.entries(), key.label) if e.measurement.key == key]
    if not matching:
        raise SpecperfError(f"{key.label}: no stored history of this key in {args.store}")
    entry = matching[0]
    bad = since_run(entry, args.bad, "--bad") if args.bad is not None else len(entry.runs) - 1
    good = since_run(entry, args.good, "--good") if args.good is not None else _before_change(entry, config)
    if good == bad:
        raise SpecperfError(f"{key.label}: the good and the bad run are the same run ({good + 1})")
    old, new = entry.runs[good].measurement.fingerprint, entry.runs[bad].measurement.fingerprint
    if old is None or new is None:
        raise SpecperfError(f"{key.label}: run {(good if old is None else bad) + 1} has no fingerprint to compare")
    found = placed(differences(old, new), config, key.server)
    if builds:
        return key, _run(entry, good), _run(entry, bad), found
    if not found:
        raise SpecperfError(
            f"{key.label}: runs {good + 1} and {bad + 1} have the same fingerprint: there is no difference to "
            "bisect (if the bad run is slower, it is the node, the driver or noise)"
        )
    if not any(d.applicable for d in found):
        listed = "; ".join(str(d) for d in found)
        raise SpecperfError(f"{key.label}: no difference can be set by a start (only {listed}): nothing to bisect")
    return key, _run(entry, good), _run(entry, bad), found


def _before_change(entry: StoredBaseline, config: SpecperfConfig) -> int:
    first = in_force_run(entry, Limits.tolerating(config.max_regression, config.max_regression_accept_length))
    if first is None or first == 0:
        raise SpecperfError(
            f"{entry.measurement.key.label}: no change in force in its history; name the good run "
            "with --good (its number in `specperf history`, its date or its commit)"
        )
    return first - 1


def _run(entry: StoredBaseline, index: int) -> tuple[int, str, Any]:
    return index, run_name(entry, index), entry.runs[index].measurement


def _bisect(runner: BisectRunner, good_run: Any, config: SpecperfConfig) -> dict[str, Any]:
    """The good setup on this node, then the bad setup (reproduce), the search and its check."""
    anchor = runner.measure_good_setup()
    here = speedup_estimate([anchor], [good_run.samples("output_throughput")], config.run_to_run_cv)
    if (
        decide_threshold(here, Tolerance(config.max_regression).regression_bound, Direction.HIGHER_IS_BETTER)
        is Decision.MISSED
    ):
        line = (
            f"no difference in the fingerprint explains it: with every difference at its good value this node "
            f"measures {here.value - 1:+.1%} against the good run (the node, the driver, the hardware)"
        )
        return {"outcome": UNEXPLAINED, "causes": [], "lines": [line]}
    answer = bisect(len(runner.found), runner.judge, runner.good_setup_holds)
    result: dict[str, Any] = {"outcome": answer.outcome, "causes": [], "uncertain": bool(answer.uncertain)}
    result["uncertain_starts"] = [[runner.found[i].name for i in sorted(s)] for s in answer.uncertain]
    if answer.outcome == NOT_REPRODUCED:
        lines = [NOT_REPRODUCED_LINE] + ([f"  ({answer.note})"] if answer.note else [])
    elif answer.outcome == TOO_NOISY:
        lines = [
            "not bisected: the good setup itself moved beyond the tolerance between its starts twice; this "
            "node is too noisy to bisect by single starts (raise `rounds`, or `max_regression` for the bisection)"
        ]
    elif answer.outcome == UNEXPLAINED:
        lines = [f"no difference explains it: {answer.note}"]
    else:
        lines = _found_lines(runner, answer, result)
    if answer.uncertain:
        lines.append(_uncertain_line(runner, answer))
    lines.append(f"{runner.server_starts} server starts")
    result["lines"] = lines
    return result


NOT_REPRODUCED_LINE = (
    "not reproduced: tonight's setup measures as fast as the good one — the night was the node or noise "
    "(no difference is named)"
)


def _found_lines(runner: BisectRunner, answer: Answer, result: dict[str, Any]) -> list[str]:
    groups = [list(g) for g in answer.groups]
    causes = [runner.found[i] for group in groups for i in group]
    result.update(causes=causes, groups=groups)
    lines = [("uncertain: " if answer.uncertain else "") + _causes_line([[runner.found[i] for i in g] for g in groups])]
    lines.append("restore: " + "; ".join(c.setting(bad=False) for c in causes))
    if len(causes) < len(runner.found):
        lines.append(
            "checked: with these at their good values and every other difference at its bad value, a start is good"
            if answer.checked
            else "checked: every other difference was at its bad value in a start that was good"
        )
    variables = [c for c in causes if c.kind == "env"]
    if variables:
        settings = " ".join(c.setting(bad=False).replace("unset ", "-u ") for c in variables)
        lines.append(f"check: env {settings} pytest  (with the good values the key should be back at its level)")
    return lines


def _uncertain_line(runner: BisectRunner, answer: Answer) -> str:
    sets = ["{" + ", ".join(runner.found[i].name for i in sorted(s)) + "}" for s in answer.uncertain]
    return (
        "the answer rests on start(s) that stayed unclear after three starts each: "
        + "; ".join(sets)
        + " (raise `rounds`, or set `run_to_run_cv` to this node's start-to-start spread)"
    )


def _causes_line(groups: list[list[Difference]]) -> str:
    """The line that names the causes: one, a pair that only acts together, or several groups each on its own."""
    if len(groups) == 1:
        [group] = groups
        both = " (only together)" if len(group) > 1 else ""
        return f"cause{'s' if len(group) > 1 else ''}{both}: " + "; ".join(str(c) for c in group)
    parts = [" + ".join(str(c) for c in g) + (" (only together)" if len(g) > 1 else "") for g in groups]
    return "causes (each costs throughput on its own; restore every one): " + "; ".join(parts)


def _bisect_builds(runner: BisectRunner, builds: list[str], good_run: Any, config: SpecperfConfig) -> dict[str, Any]:
    """The good setup on the oldest build, the newest build, then a binary search for the first slow one."""
    anchor = runner.measure_good_setup(builds[0])
    here = speedup_estimate([anchor], [good_run.samples("output_throughput")], config.run_to_run_cv)
    if (
        decide_threshold(here, Tolerance(config.max_regression).regression_bound, Direction.HIGHER_IS_BETTER)
        is Decision.MISSED
    ):
        line = (
            f"no build explains it: the oldest build ({builds[0]}) measures {here.value - 1:+.1%} against the good "
            "run on this node too (the node, the driver, the hardware, or an older build)"
        )
        return {"causes": [], "lines": [line]}
    if not runner.is_bad_build(builds[-1]):
        return {"causes": [], "lines": [f"no build explains it: the newest build ({builds[-1]}) is as fast"]}
    first = first_bad(len(builds), lambda i: runner.is_bad_build(builds[i]))
    lines = [
        f"first slow build: {builds[first]} (the newest good one: {builds[first - 1]})",
        f"restore: python = {builds[first - 1]!r}  (the server config's, or the suite's, `python`)",
        f"{runner.server_starts} server starts",
    ]
    return {"causes": [], "builds": {"first_slow": builds[first], "last_good": builds[first - 1]}, "lines": lines}


def _document(
    key: MeasurementKey,
    good: tuple[int, str, Any],
    bad: tuple[int, str, Any],
    found: list[Difference],
    runner: BisectRunner,
    result: dict[str, Any],
) -> dict[str, Any]:
    return {
        "key": key.label,
        "good_run": {"number": good[0] + 1, "name": good[1]},
        "bad_run": {"number": bad[0] + 1, "name": bad[1]},
        "differences": [
            {"name": d.name, "good": d.good, "bad": d.bad, "applicable": d.applicable, "carrier": _carrier(d)}
            for d in found
        ],
        "starts": [_start_json(s, runner) for s in runner.starts],
        "causes": [
            {"name": c.name, "good": c.good, "bad": c.bad, "restore": c.setting(bad=False)} for c in result["causes"]
        ],
        "cause_groups": [[runner.found[i].name for i in group] for group in result.get("groups", [])],
        "outcome": result.get("outcome"),
        "uncertain": result.get("uncertain", False),
        "uncertain_starts": result.get("uncertain_starts", []),
        "server_starts": runner.server_starts,
        "good_setup_starts": runner.good_setup_starts,
        "builds": result.get("builds"),
        "lines": result["lines"],
    }


def _carrier(difference: Difference) -> str | None:
    """Where a start sets it: "env", "args", "sim_args"; None when it cannot be set."""
    if not difference.applicable:
        return None
    return "env" if difference.kind == "env" else difference.carrier


def _start_json(start: Start, runner: BisectRunner) -> dict[str, Any]:
    return {
        "build": start.build,
        "bad_values": [runner.found[i].name for i in sorted(start.applied)],
        "verdict": start.verdict,
        "certain": not start.verdict.endswith("(uncertain)"),
        "ratio": start.ratio.value,
        "server_starts": start.starts,
    }
