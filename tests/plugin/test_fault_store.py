"""Fault matrix, store and secret cases: a corrupt, newer-schema or unwritable store, two sessions at once.

Each case asserts the error text, the exit code, the report row (terminal table and JSON), the
stored files and that no simulator process is left (the `make_suite` fixture checks the last).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from plugin_suites import ONE_MEASURED_TEST, STEADY_WORKLOAD

from pytest_specperf.measure.machinelock import MachineLock


def store_suite(make_suite, tests: str = ONE_MEASURED_TEST, extra: str = ""):
    return make_suite(tests, extra=extra, workloads=STEADY_WORKLOAD)


def stored(suite) -> dict[str, str]:
    root = suite.pytester.path / ".specperf" / "sim"  # the simulator's baselines
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*.jsonl"))}


def json_rows(path: Path) -> dict[str, str]:
    data = json.loads(path.read_text())
    return {m["label"]: m["verdict"] for m in data["measurements"]}


def table_verdict(result: pytest.RunResult, label_start: str) -> str:
    """The verdict column of the terminal table row whose server is `label_start`."""
    for line in result.outlines:
        cells = line.split()
        if cells and cells[0] == label_start and cells[-1].isupper():
            return cells[-1]
    raise AssertionError(f"no table row for {label_start}:\n" + result.stdout.str())


def assert_one_line_error(result: pytest.RunResult, *needles: str) -> None:
    text = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in text and "raise " not in text, text
    for needle in needles:
        assert needle in text, (needle, text)


@pytest.fixture
def immutable() -> Iterator[list[Path]]:
    """Directories made immutable (`chattr +i`): writes fail with EPERM even for root.

    The suite runs as root, so `chmod` cannot make a store read-only; an immutable attribute can,
    and it is a real file-system refusal (not a simulated one). Undone after the test so that
    pytest can remove its temp folder.
    """
    made: list[Path] = []
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    yield made
    for path in reversed(made):
        subprocess.run(["chattr", "-i", str(path)], check=False)


def make_immutable(made: list[Path], path: Path) -> None:
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"chattr +i does not work here: {done.stderr.strip()}")
    made.append(path)


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist"])
def test_corrupt_baseline_row_is_error(make_suite, xdist: bool) -> None:
    if xdist:
        pytest.importorskip("xdist")
    suite = store_suite(make_suite)
    suite.run("--specperf-update").assert_outcomes(passed=1)
    broken = suite.pytester.path / ".specperf" / "sim" / "eagle3-5step" / "default-c1.jsonl"
    broken.write_text("{not json\n")
    before = stored(suite)
    report = suite.pytester.path / "out.json"
    result = suite.run(f"--specperf-json={report}", *(["-n", "2"] if xdist else []), subprocess=xdist)
    result.assert_outcomes(errors=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert_one_line_error(result, "default-c1.jsonl", "not valid JSON", "restore it from version control")
    assert table_verdict(result, "eagle3-5step") == "ERROR"
    assert json_rows(report)["eagle3-5step/default/c1"] == "ERROR"
    warnings = json.loads(report.read_text())["warnings"]
    assert any(w.startswith("ERROR eagle3-5step/default/c1:") and "not valid JSON" in w for w in warnings), warnings
    assert stored(suite) == before


def test_newer_schema_baseline_row_is_error(make_suite) -> None:
    suite = store_suite(make_suite)
    suite.run("--specperf-update").assert_outcomes(passed=1)
    path = suite.pytester.path / ".specperf" / "sim" / "eagle3-5step" / "default-c1.jsonl"
    data = json.loads(path.read_text())
    data["run"]["v"] = 99
    path.write_text(json.dumps(data) + "\n")
    before = stored(suite)
    report = suite.pytester.path / "out.json"
    markdown = suite.pytester.path / "out.md"
    result = suite.run(f"--specperf-json={report}", f"--specperf-markdown={markdown}")
    result.assert_outcomes(errors=1)
    assert_one_line_error(result, "layout 99 is newer", "upgrade pytest-specperf")
    assert table_verdict(result, "eagle3-5step") == "ERROR"
    assert json_rows(report)["eagle3-5step/default/c1"] == "ERROR"
    md_row = next(line for line in markdown.read_text().splitlines() if line.startswith("| eagle3-5step"))
    assert "ERROR" in md_row and "NEW" not in md_row and "PASS" not in md_row
    assert stored(suite) == before


def test_read_only_store_is_a_one_line_error(make_suite, immutable) -> None:
    suite = store_suite(make_suite)
    suite.run("--specperf-update").assert_outcomes(passed=1)
    before = stored(suite)
    make_immutable(immutable, suite.pytester.path / ".specperf" / "sim" / "eagle3-5step")
    report = suite.pytester.path / "out.json"
    result = suite.run("--specperf-update", f"--specperf-json={report}")
    # the test passed; its run is stored after the checks, and a store that cannot be written fails the session
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert result.parseoutcomes() == {"passed": 1}
    text = " ".join(result.stdout.str().split())
    assert "eagle3-5step/default-c1.jsonl: cannot write the baseline (Operation not permitted" in text
    assert "at a writable directory" in text and "Traceback" not in text
    assert table_verdict(result, "eagle3-5step") == "ERROR"
    assert json_rows(report)["eagle3-5step/default/c1"] == "ERROR"
    after = stored(suite)
    assert after["eagle3-5step/default-c1.jsonl"] == before["eagle3-5step/default-c1.jsonl"]  # untouched
    assert after["plain/default-c1.jsonl"] != before["plain/default-c1.jsonl"]  # a writable folder is updated
    assert not list((suite.pytester.path / ".specperf").rglob("*.tmp"))


def test_two_updating_sessions_measure_one_at_a_time(make_suite) -> None:
    """Two pytest sessions on one machine: the machine lock keeps their measurements apart in time,
    the waiting is reported, and the store they both update keeps every baseline whole.

    The test holds the machine's lock itself until both sessions queue for it (they append a
    `waiting` line), so both certainly wait: no timing assumption.
    """
    suite = store_suite(
        make_suite,
        {
            "test_a": ONE_MEASURED_TEST,
            "test_b": ONE_MEASURED_TEST.replace('server="eagle3-5step"', 'server="eagle3-2step"'),
        },
    )
    path = suite.pytester.path
    lock_dir = path / "machine-locks"
    env = {**os.environ, "SPECPERF_LOCK_DIR": str(lock_dir)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    procs = []
    holder = MachineLock("the-test", lock_dir, env)
    with holder.hold("held by the test"):
        for name in ("a", "b"):
            cmd = [
                sys.executable,
                "-m",
                "pytest",
                f"test_{name}.py",
                "-p",
                "no:randomly",
                "-p",
                "no:cacheprovider",
                f"--specperf-run-dir={path / ('run-' + name)}",
                "--specperf-update",
                f"--specperf-json={path / (name + '.json')}",
            ]
            procs.append(
                subprocess.Popen(cmd, cwd=path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            )
        try:
            wait_for(lambda: len(waiting_sessions(lock_dir)) == 2, timeout=120, procs=procs)
        except BaseException:
            for proc in procs:
                proc.kill()
            raise
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    ours = [i for i in holder.intervals() if i.session != "the-test"]
    assert len(ours) == 4 and all(i.end is not None for i in ours), ours  # plain + one speculative, per session
    for first, second in itertools.pairwise(ours):
        assert first.end is not None and first.end <= second.start, (first, second)  # one at a time
    assert len({i.session for i in ours}) == 2
    for output, name in zip(outputs, "ab", strict=True):
        assert "waited" in output and "held by the test" in output, output
        document = json.loads((path / f"{name}.json").read_text())
        warnings = document["warnings"]
        assert any("waited" in w and "another session's measurement" in w for w in warnings), warnings
        notes = [n for m in document["measurements"] for n in m["notes"]]
        assert any("waited" in n for n in notes), notes  # a wait is a note of the measurement, not a disturbance
        assert not any("waited" in w for m in document["measurements"] for w in m["warnings"])
        assert not any("overlapped" in w for w in warnings), warnings
    files = stored(suite)
    assert sorted(files) == ["eagle3-2step/default-c1.jsonl", "eagle3-5step/default-c1.jsonl", "plain/default-c1.jsonl"]
    for text in files.values():
        assert len(json.loads(text.splitlines()[-1])["run"]["rounds"][0]) >= 2  # a column: a value per round


def test_an_overlap_with_a_session_outside_the_lock_is_a_warning(make_suite) -> None:
    """A measurement recorded by another session on the same GPUs during ours (it used another
    lock folder, or overlapping GPU sets) becomes a warning on the row and in the baseline."""
    suite = store_suite(make_suite, ONE_MEASURED_TEST.replace('server="eagle3-5step"', 'server="plain"'))
    path = suite.pytester.path
    lock_dir = path / "machine-locks"
    lock_dir.mkdir()

    other = {
        "id": "x:1:1",
        "session": "elsewhere",
        "pid": os.getpid(),
        "gpus": "all",
        "label": "other/default/c1",
        "start": time.time(),
    }
    (lock_dir / "measurements.jsonl").write_text(json.dumps(other) + "\n")  # still running: this very process
    report = path / "out.json"
    result = suite.run("--specperf-update", f"--specperf-json={report}")
    result.assert_outcomes(passed=1)
    warnings = json.loads(report.read_text())["warnings"]
    assert any("another measurement overlapped" in w and "other/default/c1" in w for w in warnings), warnings
    # a disturbed run is not the new normal: it is not stored, and the report says why
    assert not (path / ".specperf" / "sim" / "plain" / "default-c1.json").exists()
    assert any(
        w.startswith("not stored plain/default/c1: sanity warning: another measurement overlapped") for w in warnings
    )


def waiting_sessions(lock_dir: Path) -> set[str]:
    path = lock_dir / "measurements.jsonl"
    if not path.exists():
        return set()
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {line["session"] for line in lines if "waiting" in line}


def wait_for(condition, *, timeout: float, procs) -> None:
    """Poll `condition` until it holds; fail early if a process already ended."""

    deadline = time.monotonic() + timeout
    while not condition():
        ended = [p for p in procs if p.poll() is not None]
        assert not ended, [p.communicate()[0] for p in ended]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_server_error_is_printed_once(make_suite) -> None:
    """A server that cannot start: its error appears once per test, not again as "During handling ..."."""
    suite = make_suite(
        ONE_MEASURED_TEST.replace('server="eagle3-5step"', 'server="plain"'),
        servers='[specperf.servers.plain]\nsim_args = ["--sim-fail-at-startup"]\n',
    )
    result = suite.run()
    result.assert_outcomes(errors=1)
    text = result.stdout.str()
    assert "During handling of the above exception" not in text
    errors = text.split("= ERRORS =", 1)[1].split("= specperf =", 1)[0]
    assert errors.count("plain") >= 1
    first = next(line for line in errors.splitlines() if "plain" in line and "ERROR at" not in line)
    assert errors.count(first) == 1, errors


HF_VALUE = "hf_" + "Qm7RtY2uIo9PaSd4FgHj6KlZx"
SK_VALUE = "sk-" + "e2eRandom8Key5Value"


def test_secret_values_reach_no_written_file(make_suite, monkeypatch: pytest.MonkeyPatch) -> None:
    """A token in a variable whose name does not say so (SGLANG_HF_AUTH) is found by its shape."""
    monkeypatch.setenv("SGLANG_HF_AUTH", HF_VALUE)
    monkeypatch.setenv("SPECPERF_API_KEY", SK_VALUE)
    suite = store_suite(make_suite, extra=f'env = {{ NCCL_ALGO = "Ring", SGLANG_JUDGE = "{SK_VALUE}" }}\n')
    out = suite.pytester.path / "out"
    result = suite.run(
        "--specperf-update",
        "-v",
        "--specperf-report=full",
        f"--specperf-json={out}.json",
        f"--specperf-markdown={out}.md",
        f"--specperf-bmf={out}.bmf.json",
        subprocess=True,
    )
    result.assert_outcomes(passed=1)
    written = [
        p for p in suite.pytester.path.rglob("*") if p.is_file() and p.suffix in {".json", ".jsonl", ".md", ".log"}
    ]
    assert {p.name for p in written} >= {"out.json", "out.md", "out.bmf.json", "default-c1.jsonl"}
    for text in [result.stdout.str(), result.stderr.str(), *(p.read_text(errors="replace") for p in written)]:
        assert HF_VALUE not in text and SK_VALUE not in text
    line = (suite.pytester.path / ".specperf" / "sim" / "plain" / "default-c1.jsonl").read_text().splitlines()[-1]
    digest = json.loads(line)["run"]["fingerprint"]
    stored = json.loads((suite.pytester.path / ".specperf" / "fingerprints" / f"{digest}.json").read_text())
    assert stored["environment"]["SGLANG_HF_AUTH"] == "<redacted>"


def test_json_path_after_a_space_outside_the_suite_keeps_the_config(make_suite, tmp_path_factory) -> None:
    """`--specperf-json PATH` (space, existing file elsewhere): pytest takes PATH for its rootdir
    before the plugin's options are known; the plugin still finds the suite's config."""
    suite = store_suite(make_suite, ONE_MEASURED_TEST.replace('server="eagle3-5step"', 'server="plain"'))
    outside = tmp_path_factory.mktemp("elsewhere") / "out.json"
    outside.write_text("{}")
    result = suite.run("--specperf-json", str(outside))
    result.assert_outcomes(passed=1)
    assert json_rows(outside) == {"plain/default/c1": "NEW"}


def test_a_suite_in_a_subfolder_is_found_from_the_project_root(make_suite) -> None:
    """The nightly recipe runs `pytest perf/` in a checkout whose root has its own pyproject.toml (so that
    is pytest's rootdir): the suite's specperf.toml beside its tests is the config, as a conftest.py
    there would be found."""
    suite = store_suite(make_suite, ONE_MEASURED_TEST.replace('server="eagle3-5step"', 'server="plain"'))
    root = suite.pytester.path
    (root / "perf").mkdir()
    for name in ("specperf.toml", "test_suite.py"):
        (root / name).rename(root / "perf" / name)
    (root / "pyproject.toml").write_text('[project]\nname = "app"\n\n[tool.pytest.ini_options]\naddopts = ""\n')
    result = suite.run("perf/", "--specperf-json=out.json")
    result.assert_outcomes(passed=1)
    assert f"rootdir: {root}" in result.stdout.str()
    assert json_rows(root / "out.json") == {"plain/default/c1": "NEW"}
