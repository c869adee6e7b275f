"""The stored histories a session compares with: each read once from the store, as it was before tonight."""

from __future__ import annotations

from collections.abc import Mapping

from pytest_specperf.config.settings import SIM_LAUNCHER, SpecperfConfig
from pytest_specperf.errors import SpecperfError, StoreError
from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.store.base import Store
from pytest_specperf.store.records import StoredBaseline, is_simulated


class Baselines:
    """Stored baselines by key, read once (`of`); a simulated measurement reads the simulator's."""

    def __init__(
        self, config: SpecperfConfig, store: Store, measurements: Mapping[MeasurementKey, Measurement]
    ) -> None:
        self.config = config
        self.store = store
        self.measurements = measurements
        self._read: dict[MeasurementKey, StoredBaseline | None] = {}

    def of(self, key: MeasurementKey) -> StoredBaseline | None:
        """The stored baseline of a measurement (read once; StoreError names a bad file)."""
        if key not in self._read:
            try:
                self._read[key] = self.store.load(key, simulated=self._simulated(key))
            except StoreError as exc:
                if "upgrade" in str(exc):  # a newer schema already says what to do
                    raise
                raise StoreError(
                    f"{exc}; restore it from version control (git checkout -- FILE) or delete it to store a new "
                    "baseline with --specperf-update"
                ) from None
        return self._read[key]

    def readable(self, key: MeasurementKey) -> StoredBaseline | None:
        """The baseline for a report row; a bad file was already reported by the tests using it."""
        try:
            return self.of(key)
        except SpecperfError:
            return None

    def _simulated(self, key: MeasurementKey) -> bool:
        """Whether `key` is measured on the simulator: its fingerprint says so, else the launcher."""
        measurement = self.measurements.get(key)
        if measurement is not None and measurement.fingerprint is not None:
            return is_simulated(measurement.fingerprint)
        return self.config.launcher == SIM_LAUNCHER
