"""The session's measurements: each measured once, on first request, and shared by every test of it.

The reference's measurements are made in one stretch, first, while its server is up (every
speculative test compares with them). Under pytest-xdist, a measurement one worker made is read by
the others from the session's measurement cache (measure/cache.py), and "did another worker measure
it meanwhile?" is asked under the session's lock; every measurement on the machine, of any session,
is kept apart in time by the machine's lock (measure/machinelock.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_specperf.config.settings import SpecperfConfig
from pytest_specperf.errors import SpecperfError, StalledServer
from pytest_specperf.measure.cache import MeasurementCache
from pytest_specperf.measure.machinelock import Holding, MachineLock
from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.servers.pool import RunningServer, ServerPool
from pytest_specperf.session.plan import Plan

if TYPE_CHECKING:
    from pytest_specperf.measure.rounds import Cut, Measurer  # imports the HTTP client


class Measurements:
    """Measurements by key, and the measurements that failed (with why)."""

    def __init__(
        self,
        config: SpecperfConfig,
        plan: Plan,
        pool: ServerPool,
        measurer: Measurer,
        *,
        machine_lock: MachineLock,
        cache: MeasurementCache | None = None,
        release: Callable[[str], None] = lambda server: None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.plan = plan
        self.pool = pool
        self.measurer = measurer
        self.machine_lock = machine_lock
        self.cache = cache
        self.release = release  # stops a server no remaining test needs
        self.progress = progress
        self.done: dict[MeasurementKey, Measurement] = {}
        self.failures: dict[MeasurementKey, SpecperfError] = {}
        #: measurements the session was cut short in (Ctrl-C, SIGTERM, a time limit): how far each got,
        #: and the rounds a first measurement completed (a measurement in `done` keeps its own)
        self.cut: dict[MeasurementKey, Cut] = {}
        self.partial: dict[MeasurementKey, Measurement] = {}
        self._starts: dict[MeasurementKey, int] = {}  # the server start each was last measured on

    def get(self, key: MeasurementKey) -> Measurement:
        """The shared measurement of a key, measured on first request (SpecperfError: it failed)."""
        if key in self.failures:
            raise self.failures[key]
        if self._known(key):
            return self.done[key]
        try:
            server = self.pool.acquire(key.server)
            with self.session_lock():
                if self._known(key):  # another xdist worker measured it meanwhile
                    return self.done[key]
                with self.machine_lock.hold(key.label) as holding:
                    self.done[key] = self.measurer.measure(
                        server,
                        self.config.workloads[key.workload],
                        key.concurrency,
                        is_reference=key.server == self.config.reference,
                    )
                self._starts[key] = server.start
                self._note(self.done[key], holding)
                self._publish(self.done[key])
        except StalledServer as exc:  # hung: every further request would wait out the stall again
            self.failures[key] = exc
            self.pool.discard(key.server, exc)
            raise
        except SpecperfError as exc:
            self.failures[key] = exc
            raise
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (a cancelled job, a time limit) made one
            self._interrupted(key)
            raise
        finally:
            self.measurer.underway = None
        return self.done[key]

    def reference_of(self, key: MeasurementKey) -> Measurement | None:
        """The reference's measurement of `key`'s workload and level; None when there is none, or when
        it failed (its own row says ERROR; a check that needs it says so: `Looks.evaluate`)."""
        if self.config.reference_server is None or key.server == self.config.reference:
            return None
        self.measure_reference()
        try:
            return self.get(self.plan.reference_key(key))
        except SpecperfError:
            return None

    def measure_reference(self) -> None:
        """Measure every planned reference workload in one stretch, while its server is up."""
        missing = [k for k in self.plan.reference_keys() if not self._known(k)]
        if not missing:
            return
        for key in missing:
            with contextlib.suppress(SpecperfError):  # remembered in self.failures for the tests needing it
                self.get(key)
        self.release(self.config.reference)

    def measured_on_current_start(self, key: MeasurementKey) -> bool:
        """Whether the server start `key` was last measured on is the one running now."""
        return self._starts.get(key) == self.pool.current_start(key.server)

    def more(self, result: Measurement, measure: Callable[[RunningServer], None]) -> None:
        """More rounds of a measurement (a second look, a second server start), under the same locks."""
        try:
            server = self.pool.acquire(result.key.server)
            with self.session_lock():
                with self.machine_lock.hold(result.key.label) as holding:
                    measure(server)
                self._note(result, holding)
                self._publish(result)
        except KeyboardInterrupt:
            self._interrupted(result.key)
            raise
        finally:
            self.measurer.underway = None
        self._starts[result.key] = server.start

    def _interrupted(self, key: MeasurementKey) -> None:
        """The session was cut short while `key` was measured: keep how far it got, and its completed
        rounds, so the report shows it (never silently gone) and the store leaves it out."""
        from pytest_specperf.measure.rounds import Cut

        underway = self.measurer.underway
        if underway is None or underway.measurement.key != key:  # cut while its server started
            if key not in self.done:  # (more rounds of a measurement made: its checks had not finished)
                self.cut[key] = Cut(0, self.config.rounds)
            return
        self.cut[key] = underway.cut()
        if key not in self.done and underway.measurement.rounds:
            self.partial[key] = underway.measurement

    def _known(self, key: MeasurementKey) -> bool:
        if key in self.done or key in self.failures:
            return True
        cached = self.cache.get(key) if self.cache else None
        if cached is not None:
            self.done[key] = cached
        return cached is not None

    def session_lock(self) -> contextlib.AbstractContextManager[Any]:
        """Under xdist, the session's own lock: taken before the machine's (always this order, no deadlock).

        It guards "did another worker measure it meanwhile?" and publishing; the machine's lock
        (measure/machinelock.py) keeps every measurement on this machine, of any session, apart in time.
        """
        return self.cache.lock if self.cache is not None else contextlib.nullcontext()

    def _note(self, measurement: Measurement, holding: Holding) -> None:
        """A wait becomes a note of the measurement, an overlap a warning: its report and baseline say so."""
        wait = holding.wait_note()
        if wait is not None:
            measurement.notes.append(wait)
        measurement.warnings += holding.disturbances()
        if self.progress:
            for line in [*([wait] if wait else []), *holding.disturbances()]:
                self.progress(f"{measurement.key.label}: {line}")

    def _publish(self, measurement: Measurement) -> None:
        if self.cache is not None:
            self.cache.put(measurement)
