"""A test's checks at two looks fixed in advance: after `rounds` rounds, and once more when another
look can still change the verdict (verdict/nightly.py).

The second look extends the server start the rounds were measured on to `max_rounds` rounds, and,
when a check a start's offset can explain is still beyond its threshold, adds `rounds` rounds on a
second server start: the server is restarted unless it was restarted since (one restart confirms
every check of a server that fails together), within the session's `max_restarts`; a SUSPECT check
asks for it only when it is a change for the server as a whole (verdict/nightly.py
`worth_a_restart`), and a speedup's second start takes one of the reference too, so that the second
look is a second draw of the ratio (verdict/control.py `paired_speedups`). A check whose
value has no spread across rounds (a deterministic accept length) is never the reason for a second
start: it would measure the same value again. Why a night was decided on one start is kept
(`confirmations`), and which keys were measured again (`second_starts`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_specperf.config.settings import SpecperfConfig
from pytest_specperf.errors import SpecperfError
from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.servers.pool import ServerPool
from pytest_specperf.session.baselines import Baselines
from pytest_specperf.session.measurements import Measurements
from pytest_specperf.session.outcomes import Outcomes
from pytest_specperf.session.plan import Plan
from pytest_specperf.verdict.checks import Evaluation, Limits, evaluate
from pytest_specperf.verdict.control import SPEEDUP_CHECK, asked_among, speedup_keys
from pytest_specperf.verdict.markers import RANGE_METRICS, SpecperfMarker
from pytest_specperf.verdict.nightly import Restarts, looked, second_start_reasons, without_spread, worth_a_restart
from pytest_specperf.verdict.results import CheckResult

if TYPE_CHECKING:
    from pytest_specperf.measure.rounds import Measurer  # imports the HTTP client


class Looks:
    """Evaluates tests; holds what their second looks did (restarts, confirmations, second starts)."""

    def __init__(
        self,
        config: SpecperfConfig,
        plan: Plan,
        measurements: Measurements,
        baselines: Baselines,
        outcomes: Outcomes,
        *,
        updating: bool,
        strict: bool,
    ) -> None:
        self.config = config
        self.plan = plan
        self.measurements = measurements
        self.baselines = baselines
        self.outcomes = outcomes
        self.updating = updating
        self.strict = strict
        self.restarts = Restarts(config.max_restarts)
        self.confirmations: dict[MeasurementKey, str] = {}  # why a night was decided on one start
        self.second_starts: dict[str, list[MeasurementKey]] = {}  # keys measured again, by server

    @property
    def pool(self) -> ServerPool:
        return self.measurements.pool

    @property
    def measurer(self) -> Measurer:
        return self.measurements.measurer

    def evaluate(self, nodeid: str, result: Measurement, reference: Measurement | None) -> Evaluation:
        """All checks of a test, at two looks fixed in advance (verdict/nightly.py): after `rounds`
        rounds; when not every check is MET, after the server start is extended to `max_rounds`
        rounds and, when a check a start's offset can explain is still beyond its threshold, after
        `rounds` more rounds on a second server start (the first start's extra rounds make the
        estimate on both starts sharper: first-night detection of a -10% change 86% against 84%)."""
        marker = self.plan.marker(nodeid)
        key = result.key
        baseline = None if self.updating else self.baselines.of(key)
        reference_baseline = (
            self.baselines.readable(reference.key) if reference is not None and not self.updating else None
        )
        limits = Limits.of(self.config, key.workload, marker)
        self._check_reference(key, marker, reference)
        keys = self._keys_of(key.server)
        on_reference = speedup_keys(self.plan.needed_keys(), self.config.reference)
        tolerance = limits.tolerance("output_throughput")
        sharing = asked_among(keys, on_reference, reference, reference_baseline, tolerance)

        def look() -> Evaluation:
            return evaluate(
                result,
                reference,
                marker,
                limits,
                baseline,
                updating=self.updating,
                reference_baseline=reference_baseline,
                strict=self.strict,
                searches=self.plan.searches,
                keys=keys,
                speedup_keys=sharing,
            )

        evaluation = looked(
            look,
            settled=lambda e: e.settled,
            extend=lambda: self._extend(result),
            confirmable=lambda e: bool(confirming_checks(result, e, keys, sharing)),
            second_start=lambda e: self._second_start(result, e, reference, (keys, sharing)),
        )
        unmoved = _without_spread(result, evaluation)
        if unmoved and key not in self.confirmations and result.starts == 1:
            self.confirmations[key] = (
                f"decided on one server start: {', '.join(unmoved)} had no spread across {len(result.rounds)} "
                "rounds (a deterministic value): a second start would measure it again"
            )
        self.outcomes.add(key, evaluation.verdict)
        return evaluation

    def _extend(self, result: Measurement) -> bool:
        """The second look's extra rounds: up to `max_rounds` on the start the rounds so far were
        measured on, if that start is still the one running (False: nothing was added)."""
        key = result.key
        missing = self.config.effective_max_rounds - len(result.rounds)
        if missing <= 0 or result.starts > 1 or not self.measurements.measured_on_current_start(key):
            return False
        self.measurements.more(
            result, lambda server: self.measurer.extend(result, server, self.config.workloads[key.workload], missing)
        )
        return True

    def _keys_of(self, server: str) -> int:
        """The keys `server` measures tonight: how many can ask for its restart (`worth_a_restart`), and
        what a REGRESSION on one of its starts is judged among (`nightly.judge_night`)."""
        return sum(1 for k in self.plan.needed_keys() if k.server == server)

    def _second_start(
        self, result: Measurement, evaluation: Evaluation, reference: Measurement | None, keys: tuple[int, int]
    ) -> bool:
        """Re-measure on another server start than the first: restart the server, unless it was
        restarted since (for another measurement: one restart confirms every check of a server that
        fails together). False when no second start can be had; the confirmation log says why."""
        key = result.key
        if result.starts > 1 or not self.config.confirm:
            return False
        reasons = confirming_checks(result, evaluation, *keys)
        beyond = ", ".join(reasons)
        current = self.measurements.measured_on_current_start(key)
        restart, why = self.restarts.ask(
            on_current_start=current,
            cannot=self.pool.cannot_restart(key.server) if current else None,
            server=key.server,
        )
        if why is not None:
            self.confirmations[key] = f"decided on one server start: {why}"
            return False
        if SPEEDUP_CHECK in reasons and reference is not None:
            self._reference_again(reference, key.label)
        if restart:
            self.pool.restart(key.server, f"to confirm {key.label} ({beyond}) on a second start")
        self.measurements.more(
            result, lambda server: self.measurer.add_start(result, server, self.config.workloads[key.workload])
        )
        self.second_starts.setdefault(key.server, []).append(key)
        return True

    def _reference_again(self, reference: Measurement, label: str) -> None:
        """The reference measured on a second start of its own, before a speculative key's second start
        that confirms its speedup: a speedup carries both servers' start offsets, and a second start
        divided by the reference's first start would share that start's offset (no second draw of the
        ratio, verdict/control.py `paired_speedups`). Once per reference measurement; none when the
        reference cannot be started again (attached by URL, another worker's)."""
        ref = reference.key
        if reference.starts > 1 or self.pool.cannot_restart(ref.server) is not None:
            return
        if self.measurements.measured_on_current_start(ref):
            self.pool.restart(ref.server, f"to confirm the speedup of {label} on a second start of both servers")
        workload = self.config.workloads[ref.workload]
        self.measurements.more(reference, lambda server: self.measurer.add_start(reference, server, workload))
        self.second_starts.setdefault(ref.server, []).append(ref)
        self.measurements.release(ref.server)

    def _check_reference(
        self, key: MeasurementKey, marker: SpecperfMarker | None, reference: Measurement | None
    ) -> None:
        """A check against a reference whose measurement failed cannot be made: the test errors and
        says why, while this server's own measurement stays reported (not a 0 tok/s regression)."""
        failure = self.measurements.failures.get(self.plan.reference_key(key)) if reference is None else None
        if failure is None or marker is None:
            return
        needs = [
            name
            for name, on in (
                ("min_speedup", marker.min_speedup_at(key.concurrency) is not None),
                ("lossless", marker.lossless is not None),
            )
            if on
        ]
        if needs:
            raise SpecperfError(
                f"{', '.join(needs)} of {key.label} cannot be checked: the reference server "
                f"{self.config.reference!r} was not measured ({str(failure).splitlines()[0]})"
            )


def checked_metric(check: str) -> str:
    """The measured metric a check judges: `regression:accept_length` the accept length, a range check
    (`throughput=`, `accept_length=`) its metric, `min_speedup` and the speedup's history check the throughput."""
    if check == SPEEDUP_CHECK:
        return "output_throughput"
    if check.startswith("regression:"):
        return check.removeprefix("regression:")
    return RANGE_METRICS.get(check, "output_throughput")


def _beyond(result: Measurement, evaluation: Evaluation) -> list[tuple[str, list[float]]]:
    """The checks beyond their threshold that a start's offset could explain, with their round samples."""
    return [
        (c.name, result.samples(checked_metric(c.name))) for c in evaluation.checks if c.beyond and c.start_sensitive
    ]


def confirming_checks(result: Measurement, evaluation: Evaluation, keys: int = 1, speedup_keys: int = 1) -> list[str]:
    """The checks a second server start is taken for: beyond their threshold, explainable by a start's
    offset, with a value that varies from round to round (verdict/nightly.py `second_start_reasons`),
    and, judged against a history, a change for the server as a whole when it measures `keys` keys
    (`worth_a_restart`); for the speedup's check, among the `speedup_keys` its question is asked among
    tonight (verdict/control.py `asked_among`)."""

    def sharing(check: CheckResult) -> int:
        return max(keys, speedup_keys) if check.name == SPEEDUP_CHECK else keys

    asking = {c.name for c in evaluation.checks if c.night is None or worth_a_restart(c.night, sharing(c))}
    return [name for name in second_start_reasons(_beyond(result, evaluation)) if name in asking]


def _without_spread(result: Measurement, evaluation: Evaluation) -> list[str]:
    """The checks beyond their threshold that no second start was taken for: their value had no spread."""
    return [name for name, samples in _beyond(result, evaluation) if without_spread(samples)]
