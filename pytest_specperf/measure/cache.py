"""Finished measurements shared by the pytest-xdist workers of one session.

Every worker collects the whole suite, so two workers may need the same measurement (a reference
workload every speculative test compares with). The first measures it and leaves it here, in a
folder of this session only (`measurements/*.json`); the others read it instead of measuring it
again. `lock` is the session's measurement lock: held while measuring and while publishing, so
"did another worker measure it meanwhile?" has one answer.
"""

from __future__ import annotations

import json
from pathlib import Path

from filelock import FileLock

from pytest_specperf.common.jsonfile import atomic_write, safe_name
from pytest_specperf.measure.records import Measurement, MeasurementKey


class MeasurementCache:
    """Finished measurements on disk, shared by workers; `lock` also serialises measuring."""

    def __init__(self, shared_dir: Path) -> None:
        self.dir = shared_dir / "measurements"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.lock = FileLock(str(shared_dir / "measure.lock"))

    def _path(self, key: MeasurementKey) -> Path:
        return self.dir / f"{safe_name(key.server)}--{safe_name(key.workload)}--c{key.concurrency}.json"

    def get(self, key: MeasurementKey) -> Measurement | None:
        path = self._path(key)
        if not path.exists():
            return None
        return Measurement.from_dict(json.loads(path.read_text()))

    def put(self, measurement: Measurement) -> None:
        atomic_write(self._path(measurement.key), json.dumps(measurement.to_dict()))
