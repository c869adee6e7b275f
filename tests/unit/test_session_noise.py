"""The noise real nights had, as the simulator makes it (sim/nights.py), and the `gate` setting.

On SGLang CPU nights the machine's speed moved x3 between nights, the same for every server of the
session; at concurrency 8 the first rounds climbed 1017 -> 1281 -> 1686 tok/s; eager mode on a small
model read a 19% round CV at concurrency 1 (docs/simulator.md).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pytest_specperf.engines.suite import load_suite
from pytest_specperf.errors import ConfigError
from pytest_specperf.sim.nights import NODE_LIMIT, node_speed, round_cv, warmup_factor


def test_the_node_is_shared_by_a_session_and_moves_between_sessions_within_x3() -> None:
    nights = [node_speed(0.5, 7, n) for n in range(200)]
    assert node_speed(0.5, 7, 3) == node_speed(0.5, 7, 3)  # every server of night 3 gets the same node
    assert max(nights) <= NODE_LIMIT and min(nights) >= 1 / NODE_LIMIT
    assert max(nights) / min(nights) > 2.0  # it swings
    assert node_speed(0.0, 7, 3) == 1.0


def test_a_warm_up_ramp_only_at_high_concurrency() -> None:
    assert warmup_factor(0, 1, ramp=0.4) == 1.0
    assert warmup_factor(0, 8, ramp=0.4) == pytest.approx(0.6)
    assert warmup_factor(0, 8, ramp=0.4) < warmup_factor(1, 8, ramp=0.4) < warmup_factor(4, 8, ramp=0.4) < 1.0


def test_eager_mode_spreads_its_rounds_more_than_graphs() -> None:
    assert round_cv(True, 1) == pytest.approx(0.19)
    assert round_cv(True, 8) < round_cv(True, 1)
    assert round_cv(False, 1) < round_cv(True, 1)


BASE = """
[specperf]
launcher = "sim"
model = "m"
{gate}
[specperf.servers.plain]

[specperf.servers.eagle]
algorithm = "EAGLE3"
draft_model = "d"
num_steps = 2
eagle_topk = 1
num_draft_tokens = 3
"""


def _load(tmp_path: Path, gate: str):
    path = tmp_path / "specperf.toml"
    path.write_text(textwrap.dedent(BASE.format(gate=gate)))
    return load_suite(path, "specperf")


def test_gate_defaults_to_the_speedup_and_reads_throughput(tmp_path: Path) -> None:
    assert _load(tmp_path, "").gate == "speedup"
    assert _load(tmp_path, 'gate = "throughput"').gate == "throughput"
    with pytest.raises(ConfigError, match="gate"):
        _load(tmp_path, 'gate = "tok_s"')
