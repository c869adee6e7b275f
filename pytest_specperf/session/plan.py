"""The plan of a session: what every collected test needs, in the order the tests run.

Made once, when collection is done (`pytest_collection_modifyitems`), from each test's case and its
parsed marker; everything else asks it: which measurements the session needs, which reference
measurements those imply (every workload and level a speculative test compares at), how often a
server is used, and which concurrency a server must be started for.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pytest_specperf.config.settings import SpecperfConfig
from pytest_specperf.measure.records import MeasurementKey
from pytest_specperf.verdict.markers import Case, SpecperfMarker

#: Series a key is searched for changes in (throughput, TPOT, accept length, speedup).
SERIES_PER_KEY = 4


@dataclass(frozen=True)
class PlannedTest:
    """What one collected test item needs: its case and the checks its marker declares."""

    nodeid: str
    case: Case
    marker: SpecperfMarker | None = None


class Plan:
    """Every planned test by node id, in run order; the reference's measurements come first."""

    def __init__(self, config: SpecperfConfig, tests: Iterable[PlannedTest] = ()) -> None:
        self.config = config
        self.tests: dict[str, PlannedTest] = {t.nodeid: t for t in tests}

    def set(self, tests: Iterable[PlannedTest]) -> None:
        """Record what every collected test needs, in run order (after collection)."""
        self.tests = {t.nodeid: t for t in tests}

    def test(self, nodeid: str) -> PlannedTest | None:
        return self.tests.get(nodeid)

    def marker(self, nodeid: str) -> SpecperfMarker | None:
        test = self.tests.get(nodeid)
        return test.marker if test else None

    def server_of(self, nodeid: str) -> str | None:
        test = self.tests.get(nodeid)
        return test.case.server if test else None

    def uses(self, server: str) -> int:
        """Planned tests that use `server`."""
        return sum(1 for t in self.tests.values() if t.case.server == server)

    def max_concurrency(self, server: str) -> int:
        """The highest concurrency a server is measured at (it is started for it)."""
        levels = [key.concurrency for key in self.measurement_keys() if key.server == server]
        if server == self.config.reference:
            levels += [k.concurrency for k in self.reference_keys()]
        return max(levels or [1])

    def measurement_keys(self) -> list[MeasurementKey]:
        """The tests' own measurements, in run order (with repeats)."""
        return [t.case for t in self.tests.values() if isinstance(t.case, MeasurementKey)]

    def reference_key(self, key: MeasurementKey) -> MeasurementKey:
        """The reference's measurement of `key`'s workload and level."""
        return MeasurementKey(self.config.reference, key.workload, key.concurrency)

    def reference_keys(self) -> list[MeasurementKey]:
        """Reference measurements the plan needs: every (workload, level) a speculative test uses."""
        keys: dict[MeasurementKey, None] = {}
        if self.config.reference_server:
            for key in self.measurement_keys():
                if key.server != self.config.reference:
                    keys[self.reference_key(key)] = None
        return list(keys)

    def needed_keys(self) -> list[MeasurementKey]:
        """Every measurement the plan needs: the tests' own and the reference's."""
        keys = dict.fromkeys(self.measurement_keys())
        return [*keys, *(k for k in self.reference_keys() if k not in keys)]

    @property
    def searches(self) -> int:
        """Key series searched for changes tonight: every planned measurement's four."""
        return max(1, SERIES_PER_KEY * len(self.needed_keys()))

    def group_order(self, cases: Sequence[Case | None]) -> list[int]:
        """Sort keys that run each server's tests together, the reference's first."""
        order: dict[str, int] = {self.config.reference: 0}
        keys = []
        for case in cases:
            if case is None:
                keys.append(-1)
                continue
            order.setdefault(case.server, len(order))
            keys.append(order[case.server])
        return keys
