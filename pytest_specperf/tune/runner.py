"""Real servers for the search: the plugin's own pool, launchers, measurer and machine lock.

A candidate is measured exactly as a test measures a server: warmup, then rounds from a flushed cache
(measure/rounds.py), at every objective in turn, one measurement at a time on the machine
(measure/machinelock.py: a tune run and a test session on one node do not disturb each other). The
pool (servers/pool.py) launches at most `max_servers` servers, and the search releases each candidate
once it is measured, so a GPU node holds one model at a time.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from pytest_specperf.common import interrupts
from pytest_specperf.config.settings import SpecperfConfig
from pytest_specperf.measure.machinelock import MachineLock
from pytest_specperf.measure.records import Measurement
from pytest_specperf.measure.rounds import Measurer
from pytest_specperf.servers.pool import ServerPool
from pytest_specperf.tune.observe import LevelData, level_data
from pytest_specperf.tune.space import Candidate, Objective, TuneSpace


class ServerRunner:
    """Starts candidates and measures them; `close` stops whatever is still running."""

    def __init__(
        self,
        config: SpecperfConfig,
        space: TuneSpace,
        run_dir: Path,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.space = space
        self.config = replace(space.run_config(config), rounds=space.rounds)
        self.pool = ServerPool(
            self.config,
            run_dir,
            progress=progress,
            max_concurrency=lambda name: space.max_concurrency,
            after_fork=interrupts.check,
        )
        self.measurer = Measurer(self.config, progress)
        self.lock = MachineLock(f"tune-{uuid.uuid4().hex[:12]}")
        self.measurements: dict[tuple[str, Objective], Measurement] = {}
        self.warnings: list[str] = []

    def measure(self, candidate: Candidate, rounds: int) -> Mapping[Objective, LevelData]:
        server = self.pool.acquire(candidate.server.name)
        out = {}
        for objective in self.space.objectives:
            workload = self.config.workloads[objective.workload]
            key = (candidate.label, objective)
            label = f"{candidate.server.name}/{objective.workload}/c{objective.concurrency}"
            with self.lock.hold(label) as holding:
                measurement = self.measurements.get(key)
                if measurement is None:
                    measurement = self.measurer.measure(
                        server, workload, objective.concurrency, is_reference=candidate.is_reference
                    )
                    self.measurements[key] = measurement
                    extra = rounds - self.config.rounds
                else:
                    extra = rounds
                if extra > 0:
                    self.measurer.extend(measurement, server, workload, extra)
            for warning in [*holding.disturbances(), *measurement.warnings]:
                line = f"{candidate.label} {objective.label}: {warning}"
                if line not in self.warnings:
                    self.warnings.append(line)
            out[objective] = level_data(measurement, candidate.shape)
        return out

    def release(self, candidate: Candidate) -> None:
        self.pool.release(candidate.server.name)

    def close(self) -> None:
        self.pool.shutdown()

    @property
    def report_lines(self) -> list[str]:
        """Warnings of the measurements and of the pool (a restart, a stop that left something behind)."""
        return [*self.warnings, *self.pool.report_lines]
