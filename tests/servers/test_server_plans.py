"""A server's engine is resolved once per server plan (engines/suite.py `ServerPlan`), when the pool is
made, and carried from there: attaching, launching and restarting a config look no engine up again."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import pytest

from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.engines import engine_for
from pytest_specperf.engines import suite as engine_suite
from pytest_specperf.engines.suite import ServerPlan, server_plans
from pytest_specperf.servers.pool import ServerPool

SERVERS = {
    "sglang-ref": ServerConfig("sglang-ref", url="http://127.0.0.1:9"),
    "vllm-spec": ServerConfig("vllm-spec", engine="vllm", url="http://127.0.0.1:9"),
}
CONFIG = SpecperfConfig(servers=MappingProxyType(SERVERS), reference="sglang-ref")


def test_every_server_config_has_one_plan_with_its_own_engine() -> None:
    plans = server_plans(CONFIG)
    assert {name: plan.engine.name for name, plan in plans.items()} == {"sglang-ref": "sglang", "vllm-spec": "vllm"}
    assert plans["vllm-spec"] == ServerPlan(SERVERS["vllm-spec"], engine_for("vllm"))


def test_the_pool_resolves_each_engine_once_and_hands_out_the_plans(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    looked_up: list[str] = []
    real = engine_suite.engine_for
    monkeypatch.setattr(engine_suite, "engine_for", lambda name: looked_up.append(name) or real(name))
    pool = ServerPool(CONFIG, tmp_path)
    assert sorted(looked_up) == ["sglang", "vllm"]
    for _ in range(2):
        for name in SERVERS:
            assert pool.acquire(name).engine is pool.plans[name].engine
        pool.shutdown()
    assert sorted(looked_up) == ["sglang", "vllm"]
