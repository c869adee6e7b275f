"""A speedup's question "is a start off?" is shared by every key whose speedup carries the reference's
start, on a night that start moved (verdict/control.py `asked_among`, session/looks.py
`confirming_checks`).

A speedup divides a speculative start by a reference start, and one reference start is in the speedup
of every speculative key of the session. When it reads high, every speculative server's speedups fall
together; asked per speculative server (its own keys), each server took a restart for that one offset
of the reference (on 5 servers x 20 unchanged keys at a 2% start spread, 0.11 second starts a night;
benchmarks/verdict_nights.py).

The nights below are the H200 night's plain config at concurrency 8 (975 tok/s on its first start,
2% apart) and a speculative server 1.2x over it, ten sessions of both.
"""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

from report_samples import measurement, nightly_history

from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.session.looks import confirming_checks
from pytest_specperf.verdict.checks import Evaluation, Limits, evaluate
from pytest_specperf.verdict.control import SPEEDUP_CHECK, asked_among, speedup_keys
from pytest_specperf.verdict.stats import Decision

LIMITS = Limits(0.05, 0.02, 0.0)
SERVERS = ("eagle3-2step", "eagle3-3step", "eagle3-4step", "eagle3-5step")


def _run(server: str, level: float, rng: random.Random) -> Measurement:
    """One start of `server` near `level` tok/s: a start offset of 2%, rounds 0.3% apart."""
    start = level * math.exp(rng.gauss(0.0, 0.02))
    tok_s = [start * (1 + 0.003 * k) for k in (-1, 0, 1)]
    taus = None if server == "plain" else [3.0] * 3
    return measurement(server, tok_s, taus, [8.0] * 3, workload="code", concurrency=8)


def _night(tmp_path: Path, reference_reads: float, keys: int, sharing: int) -> tuple[Measurement, Evaluation]:
    """Tonight's speculative start on its level, over a reference start that read `reference_reads`
    times its level, judged as one of `keys` keys of its server, its speedup among `sharing` keys."""
    rng = random.Random(11)
    plain = [_run("plain", 975.0, rng) for _ in range(10)]
    spec = [_run("eagle3-2step", 1170.0, rng) for _ in range(10)]
    tok_s = [975.0 * reference_reads * (1 + 0.003 * k) for k in (-1, 0, 1)]
    reference = measurement("plain", tok_s, None, [8.0] * 3, workload="code", concurrency=8)
    tonight = measurement(
        "eagle3-2step", [1169.0, 1170.0, 1171.0], [3.0] * 3, [8.0] * 3, workload="code", concurrency=8
    )
    evaluation = evaluate(
        tonight,
        reference,
        None,
        LIMITS,
        nightly_history(spec, tmp_path / "spec.jsonl"),
        updating=False,
        reference_baseline=nightly_history(plain, tmp_path / "plain.jsonl"),
        keys=keys,
        speedup_keys=sharing,
    )
    return tonight, evaluation


def test_every_speculative_key_of_the_session_shares_the_reference_start() -> None:
    """1 reference and 4 speculative servers of 20 keys each: 80 speedups carry a reference start."""
    keys = [MeasurementKey(s, f"w{i % 5}", 1 + i // 5) for s in ("plain", *SERVERS) for i in range(20)]
    assert speedup_keys(keys, "plain") == 80
    assert speedup_keys([k for k in keys if k.server == "plain"], "plain") == 1  # no speedup: its own question


def test_a_reference_start_that_read_high_restarts_no_speculative_server(tmp_path: Path) -> None:
    """The reference's start read 10% high: the speedup fell 10.2%, beyond the tolerance, while the
    speculative server read its level. Asked per server (20 keys, the old rule), that night was a
    REGRESSION on one start that restarted the speculative server (and each of the four would have
    asked it); asked among the 80 keys whose speedup carries that reference start, it is no change for
    them as a whole: SUSPECT, no restart."""
    per_server, before = _night(tmp_path, 1.10, keys=20, sharing=20)
    shared, after = _night(tmp_path, 1.10, keys=20, sharing=80)
    speedup_before = {c.name: c for c in before.checks}[SPEEDUP_CHECK]
    speedup_after = {c.name: c for c in after.checks}[SPEEDUP_CHECK]
    assert speedup_before.estimate is not None and speedup_before.estimate.value < 0.95
    assert speedup_before.decision is Decision.MISSED
    assert SPEEDUP_CHECK in confirming_checks(per_server, before, 20, 20)
    assert speedup_after.decision is Decision.SUSPECT
    assert SPEEDUP_CHECK not in confirming_checks(shared, after, 20, 80)


def test_a_speedup_that_fell_far_beyond_what_the_reference_start_explains_still_restarts(tmp_path: Path) -> None:
    """A reference start 30% high (the speedup -24%): a change for every key sharing that start, so the
    second start of both servers is still taken, and tells the reference's offset from speculation."""
    result, evaluation = _night(tmp_path, 1.30, keys=20, sharing=80)
    assert SPEEDUP_CHECK in confirming_checks(result, evaluation, 20, 80)


def test_the_question_is_shared_only_on_a_night_the_reference_start_moved(tmp_path: Path) -> None:
    """The reference's start is a suspect only when it read beyond the tolerance of the reference's own
    level: then every speedup that carries it shares the question (80 keys); on a night it read its
    level the fall is the speculative server's, and the question stays its server's (20 keys)."""
    rng = random.Random(11)
    plain = nightly_history([_run("plain", 975.0, rng) for _ in range(10)], tmp_path / "plain.jsonl")
    tolerance = LIMITS.tolerance("output_throughput")

    def reading(factor: float) -> Measurement:
        return measurement("plain", [975.0 * factor] * 3, None, [8.0] * 3, workload="code", concurrency=8)

    assert asked_among(20, 80, reading(1.10), plain, tolerance) == 80
    assert asked_among(20, 80, reading(0.90), plain, tolerance) == 80
    assert asked_among(20, 80, reading(1.02), plain, tolerance) == 20
    assert asked_among(20, 80, None, plain, tolerance) == 20
    assert asked_among(20, 80, reading(1.10), None, tolerance) == 20


def test_the_session_asks_a_speedups_question_as_control_says(monkeypatch) -> None:
    """session/looks.py asks a speculative test's speedup among the keys `asked_among` gives for its
    server's keys (2: standalone at two levels) and the session's speculative keys (4: two servers at two
    levels), and its throughput among its own server's keys."""
    from test_deterministic_confirmation import Night, _config, _measurement

    from pytest_specperf.config.settings import ServerConfig
    from pytest_specperf.session import looks as looks_module
    from pytest_specperf.session.outcomes import Outcomes
    from pytest_specperf.session.plan import Plan, PlannedTest

    config = _config()
    config = dataclasses.replace(config, servers={**config.servers, "eagle3": ServerConfig(name="eagle3")})
    cases = [MeasurementKey(s, "code", c) for s in ("standalone", "eagle3") for c in (1, 8)]
    plan = Plan(config, [PlannedTest(f"test_perf[{k.label}]", k) for k in cases])
    asked: list[tuple[int, int]] = []
    judged: list[tuple[int, int]] = []

    def among(server_keys, sharing, *args):
        asked.append((server_keys, sharing))
        return 3

    def recorded(*args, **kwargs):
        judged.append((kwargs["keys"], kwargs["speedup_keys"]))
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(looks_module, "asked_among", among)
    monkeypatch.setattr(looks_module, "evaluate", recorded)
    collapse = _measurement("collapse-report.json")
    night = Night(list(collapse.rounds))
    looks = looks_module.Looks(config, plan, night, night, Outcomes(), updating=False, strict=False)  # type: ignore[arg-type]
    first = dataclasses.replace(collapse, rounds=list(collapse.rounds[:3]))
    looks.evaluate("test_perf[standalone/code/c1]", first, None)
    assert asked == [(2, 4)]
    assert judged and set(judged) == {(2, 3)}
