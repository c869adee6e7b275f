"""A speedup's second look is a second draw only when both servers were started again, and a server's
restart is one question for all its keys (verdict/control.py `paired_speedups`, verdict/nightly.py
`worth_a_restart`).

Replayed from real nights: the SGLang CPU nights (tests/data/real-nights/sglang-cpu-spec/: plain
131.9 and standalone 123.3 tok/s on night 1; the node x3 faster on the next session, plain 607.6 and
standalone 138.5 after the draft was swapped) and the H200 night (the same plain config read 975 then
811 tok/s on two starts at concurrency 8, -17%).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path

from report_samples import baseline_of, measurement

from pytest_specperf.measure.records import Measurement
from pytest_specperf.store.records import Provenance, StoredRun
from pytest_specperf.verdict.control import speedup_runs, speedup_samples
from pytest_specperf.verdict.nightly import PastRun, Tolerance, judge_night, worth_a_restart
from pytest_specperf.verdict.stats import Decision

NIGHTS = Path(__file__).resolve().parent.parent / "data" / "real-nights" / "sglang-cpu-spec"


def _rounds(name: str, label: str) -> list[float]:
    report = json.loads((NIGHTS / name).read_text(encoding="utf-8"))
    (found,) = [m for m in report["measurements"] if m["label"] == label]
    return [r["output_throughput"] for r in found["rounds"]]


def _on_starts(server: str, starts: list[list[float]]) -> Measurement:
    """One session's measurement of `server` whose rounds were measured on these server starts."""
    taus = None if server == "plain" else [3.24] * sum(map(len, starts))
    made = measurement(server, [x for s in starts for x in s], taus, [8.0] * sum(map(len, starts)), workload="code")
    numbers = [i for i, s in enumerate(starts) for _ in s]
    made.rounds = [dataclasses.replace(r, start=n) for r, n in zip(made.rounds, numbers, strict=True)]
    return made


def _mean(xs: list[float]) -> float:
    return math.fsum(xs) / len(xs)


def test_a_second_start_of_both_servers_is_divided_by_the_reference_start_it_was_measured_with() -> None:
    """A session that started both servers twice, on a node whose speed moved between the starts (the
    CPU nights: plain 131.9 then 607.6 tok/s). Each speculative start is divided by its own reference
    start: two draws of the speedup, 0.93x and 0.23x. The old rule divided every round by the
    reference's mean over both starts, one draw of nothing the servers did."""
    plain = [_rounds("night1-report.json", "plain/code/c1"), _rounds("collapse-report.json", "plain/code/c1")]
    spec = [
        _rounds("night1-report.json", "standalone/code/c1"),
        _rounds("collapse-report.json", "standalone/code/c1"),
    ]
    draws = speedup_samples(_on_starts("standalone", spec), _on_starts("plain", plain))
    assert len(draws) == 2
    for draw, own, reference in zip(draws, spec, plain, strict=True):
        assert math.isclose(_mean(draw), _mean(own) / _mean(reference), rel_tol=1e-12)
    assert round(_mean(draws[0]), 2) == 0.93 and round(_mean(draws[1]), 2) == 0.23


def test_a_second_start_of_the_speculative_server_alone_is_not_a_second_draw() -> None:
    """Both starts of standalone over the one reference start of the session share its offset: one
    draw, every round over that start's mean."""
    plain = [_rounds("night1-report.json", "plain/code/c1")]
    spec = [_rounds("night1-report.json", "standalone/code/c1")] * 2
    draws = speedup_samples(_on_starts("standalone", spec), _on_starts("plain", plain))
    assert len(draws) == 1 and len(draws[0]) == 6
    assert math.isclose(_mean(draws[0]), _mean(spec[0]) / _mean(plain[0]), rel_tol=1e-12)


def test_stored_runs_of_one_session_pair_in_order_with_its_reference_runs(tmp_path: Path) -> None:
    """The history's speedups pair a session's runs (one per server start) with its reference runs in
    order: the session that started both servers twice is two draws, each over its own reference start
    (the old pairing divided both by the reference's last run of the session)."""
    plain = [_rounds("night1-report.json", "plain/code/c1"), _rounds("collapse-report.json", "plain/code/c1")]
    spec = [
        _rounds("night1-report.json", "standalone/code/c1"),
        _rounds("collapse-report.json", "standalone/code/c1"),
    ]

    def history(server: str, starts: list[list[float]]):
        made = [_on_starts(server, [s]) for s in starts]
        runs = tuple(
            StoredRun(m, baseline_of(m, tmp_path / server).summary, Provenance(f"t{i}", None, "cpu", "0", "s1"), 0)
            for i, m in enumerate(made)
        )
        return dataclasses.replace(baseline_of(made[-1], tmp_path / server), runs=runs)

    past = speedup_runs(history("standalone", spec), history("plain", plain))
    assert [round(_mean(list(r.samples)), 2) for r in past] == [0.93, 0.23]
    assert {r.night for r in past} == {"s1"}


# --- a restart is the server's question ----------------------------------------------------------------


def _h200_history(seed: int = 7) -> list[PastRun]:
    """Ten nights of the plain config at concurrency 8 around its first start's 975 tok/s, 2% apart."""
    rng = random.Random(seed)
    return [
        PastRun(tuple(975.0 * math.exp(rng.gauss(0.0, 0.02)) * (1 + 0.003 * k) for k in (-1, 0, 1)), night=str(i))
        for i in range(10)
    ]


def test_a_night_probably_changed_restarts_a_server_of_one_key_not_one_of_twenty() -> None:
    """A night 6% down, beyond the 5% tolerance and probably a change (SUSPECT): alone on its server it
    asks for a second start; as one of 20 keys of a server it does not (one of 20 unchanged keys is
    that far off on many nights: a restart would be bought by noise)."""
    night = judge_night([[916.0, 917.0, 918.0]], _h200_history(), Tolerance(0.05))
    assert night.decision is Decision.SUSPECT
    assert worth_a_restart(night, keys=1)
    assert not worth_a_restart(night, keys=20)


def test_the_h200_start_to_start_fall_still_restarts_a_server_of_twenty_keys() -> None:
    """The H200's second start read 811 tok/s where the first read 975 (-17%): far beyond what 20 keys'
    noise explains, it asks for a second start on any server."""
    night = judge_night([[810.0, 811.0, 812.0]], _h200_history(), Tolerance(0.05))
    assert night.decision in (Decision.SUSPECT, Decision.MISSED)
    assert worth_a_restart(night, keys=20)


def test_a_night_within_the_tolerance_never_restarts() -> None:
    night = judge_night([[974.0, 975.0, 976.0]], _h200_history(), Tolerance(0.05))
    assert night.decision is Decision.MET and not worth_a_restart(night, keys=1)
