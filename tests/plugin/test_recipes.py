"""The GitHub Actions recipes of the manual (docs/recipes.md), run as written on the simulator.

The commands are not copied here: each test reads the workflow from the page's YAML block, takes the
jobs' `run:` lines and runs them with bash, as a runner would, in git checkouts of a project whose
performance suite lives in `perf/` (the checkout's root has a pyproject.toml of its own, so it is
pytest's rootdir), with a bare repository as their `origin`. If the page and the code disagree, a step
fails here.

What GitHub Actions does and the test stands in for: the checkout (a clone of `origin`, one per job and
machine), a step's `env:`, `${{ matrix.shard }}` (each shard of the matrix, run side by side as two
machines), `$GITHUB_STEP_SUMMARY`, and the artifacts (the files an upload step names, copied into the
report job's checkout when its download step's pattern matches). `pip install` steps are skipped: the
package is installed, and the venv's bin directory comes first on PATH. Other `uses:` steps have
nothing to run here.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from gitrepos import git
from plugin_suites import SPEC_SERVERS, config_text

RECIPES = Path(__file__).resolve().parents[2] / "docs" / "recipes.md"
BRANCH = "specperf-history"
#: the suite's own settings: a git store, and history checks that a busy machine cannot fail (this is
#: about where the runs go and what the jobs leave, not what the nights say)
PERF_CONFIG = f'store = "git:{BRANCH}"\nmax_regression = 0.9\nmax_regression_accept_length = 0.9\n'
PERF_TESTS = """
import pytest


@pytest.mark.specperf()  # every speculative config; --specperf-servers picks a machine's shard
def test_speedup(specperf):
    pass
"""
#: the checkout's root is a project of its own, as a real repository's is
PYPROJECT = """
[project]
name = "serving-stack"
version = "0.1.0"
"""


# ---- the page ---------------------------------------------------------------------------------------


@dataclass
class Step:
    keys: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)

    @property
    def run(self) -> str | None:
        return self.keys.get("run")

    @property
    def uses(self) -> str:
        return self.keys.get("uses", "")

    def with_value(self, key: str) -> str:
        """One key of the step's `with: {...}` flow mapping (quotes removed, `\\n` a newline)."""
        found = re.search(rf'(?:^|[{{,]\s*){re.escape(key)}:\s*("(?:[^"\\]|\\.)*"|[^,}}]+)', self.keys.get("with", ""))
        assert found, f"no `{key}` in the step's with: {self.keys}"
        value = found.group(1).strip()
        return json.loads(value) if value.startswith('"') else value


@dataclass
class Job:
    name: str
    text: str
    steps: list[Step]

    def matrix(self, key: str) -> list[str]:
        found = re.search(rf"^\s+{re.escape(key)}: \[(.*)\]\s*$", self.text, re.M)
        assert found, f"job {self.name} has no matrix of {key}"
        return [value.strip() for value in found.group(1).split(",")]


def without_comment(line: str) -> str:
    """A YAML line without its comment: a `#` after whitespace, outside quotes."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "\"'" and (i == 0 or line[i - 1] in " :[{,"):
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def parse_steps(text: str) -> list[Step]:
    """The items of a job's `steps:` list (single-line values, and `env:` as a nested mapping)."""
    lines = [without_comment(line) for line in text[text.index("steps:\n") :].splitlines()[1:]]
    lines = [line for line in lines if line.strip()]
    dash = len(lines[0]) - len(lines[0].lstrip())
    steps: list[Step] = []
    nested: dict[str, str] | None = None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        if indent < dash:
            break
        if indent == dash:
            assert line.lstrip().startswith("- "), line
            steps.append(Step({}))
            line = " " * (dash + 2) + line.lstrip()[2:]
            indent = dash + 2
        key, _, value = line.strip().partition(":")
        value = value.strip()
        if indent == dash + 2:
            assert not value.startswith(("|", ">")), f"a multi-line `{key}:` (the test reads single lines): {line}"
            nested = steps[-1].env if key == "env" else None
            if key != "env":
                steps[-1].keys[key] = value
        else:
            assert nested is not None, f"a nested line outside `env:`: {line}"
            nested[key] = value.strip("\"'")
    return steps


def workflows() -> list[dict[str, Job]]:
    """Every GitHub Actions workflow on the recipes page: its jobs by name."""
    found = []
    for block in re.findall(r"^```yaml\n(.*?)^```", RECIPES.read_text(), re.S | re.M):
        jobs = block[block.index("\njobs:\n") + len("\njobs:\n") :]
        parts = re.split(r"^  ([\w-]+):\s*$", jobs, flags=re.M)  # ["", name, text, name, text, ...]
        named = zip(parts[1::2], parts[2::2], strict=True)
        found.append({name: Job(name, text, parse_steps(text)) for name, text in named})
    return found


def workflow(*, matrix: bool) -> dict[str, Job]:
    """The nightly workflow of one job, or the one whose jobs include a matrix of shards."""
    chosen = [w for w in workflows() if any("matrix:" in job.text for job in w.values()) == matrix]
    assert len(chosen) == 1, f"{len(chosen)} workflows {'with' if matrix else 'without'} a matrix on the page"
    return chosen[0]


def substituted(text: str, shard: str | None = None) -> str:
    """What GitHub Actions substitutes before a step runs: here, only the matrix's shard."""
    if shard is not None:
        text = text.replace("${{ matrix.shard }}", shard)
    assert "${{" not in text, f"an expression the test cannot stand in for: {text}"
    return text


def commands(job: Job) -> list[Step]:
    """The job's steps that run something here: `run:` lines, `pip install` left out."""
    return [step for step in job.steps if step.run and not step.run.startswith("pip install")]


# ---- the machines -----------------------------------------------------------------------------------


def origin_with_the_project(root: Path, token: str) -> Path:
    """A bare repository whose `main` holds a project with its performance suite in `perf/`."""
    origin = root / "origin.git"
    git(root, "init", "--quiet", "--bare", str(origin))
    project = root / "project"
    git(root, "init", "--quiet", str(project))
    (project / "pyproject.toml").write_text(PYPROJECT.lstrip())
    (project / "perf").mkdir()
    (project / "perf" / "specperf.toml").write_text(config_text(token, extra=PERF_CONFIG, servers=SPEC_SERVERS))
    (project / "perf" / "test_perf.py").write_text(textwrap.dedent(PERF_TESTS).lstrip())
    git(project, "add", ".")
    git(project, "commit", "--quiet", "-m", "the project and its performance suite")
    git(project, "push", "--quiet", str(origin), "HEAD:refs/heads/main")
    return origin


class Runner:
    """One job on one machine: a checkout of `origin` (actions/checkout), its own temp folder and
    measurement lock, and bash with the venv's commands first on PATH."""

    def __init__(self, root: Path, origin: Path, name: str) -> None:
        self.name = name
        self.checkout = root / name
        git(root, "clone", "--quiet", "--branch", "main", str(origin), str(self.checkout))
        tmp = root / f"tmp-{name}"
        tmp.mkdir()
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GITHUB_"))}
        self.env = {
            **inherited,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "TMPDIR": str(tmp),
            "SPECPERF_LOCK_DIR": str(root / f"locks-{name}"),
            "GITHUB_STEP_SUMMARY": str(root / f"step-summary-{name}.md"),
        }

    def start(self, step: Step, shard: str | None = None) -> subprocess.Popen[str]:
        command = substituted(step.run or "", shard)
        env = {**self.env, **{key: substituted(value, shard) for key, value in step.env.items()}}
        return subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", command],
            cwd=self.checkout,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def run(self, step: Step, shard: str | None = None) -> str:
        return finished(self, self.start(step, shard), step)


def finished(runner: Runner, process: subprocess.Popen[str], step: Step) -> str:
    output = process.communicate(timeout=600)[0]
    assert process.returncode == 0, f"{runner.name}: `{step.run}` exited {process.returncode}:\n{output}"
    return output


def simulators(token: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and any(token in p for p in proc.info["cmdline"] or []):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def assert_no_simulator_left(token: str) -> None:
    leftovers = [p.pid for p in simulators(token)]
    for pid in leftovers:
        psutil.Process(pid).kill()
    assert not leftovers, f"simulator processes left behind: {leftovers}"


def history(origin: Path, key: str) -> list[dict]:
    """The runs of a history on the branch, each with its fingerprint (stored once, by digest)."""
    runs = [json.loads(line)["run"] for line in git(origin, "show", f"{BRANCH}:sim/{key}.jsonl").splitlines()]
    for run in runs:
        run["fingerprint"] = json.loads(git(origin, "show", f"{BRANCH}:fingerprints/{run['fingerprint']}.json"))
    return runs


def published_panels(origin: Path) -> dict[str, str]:
    """The dashboard on the branch: runs per key, from its panels."""
    page = git(origin, "show", f"{BRANCH}:suite.html")
    panel = r'<article class="panel[^"]*" id="[^"]+" data-key="([^"]+)" data-layer="sim" data-runs="(\d+)"'
    return dict(re.findall(panel, page))


# ---- the recipes ------------------------------------------------------------------------------------


def test_the_nightly_job_records_onto_the_branch_and_publishes_its_dashboard(tmp_path: Path) -> None:
    (job,) = workflow(matrix=False).values()
    steps = commands(job)
    assert [s.run.split()[:2] for s in steps if s.run] == [["pytest", "perf/"], ["specperf", "dashboard"]]
    token = uuid.uuid4().hex[:12]
    origin = origin_with_the_project(tmp_path, token)
    runner = Runner(tmp_path, origin, "gpu-node")
    try:
        outputs = [runner.run(step) for step in steps]
    finally:
        assert_no_simulator_left(token)

    checkout = runner.checkout
    assert f"rootdir: {checkout}" in outputs[0]  # the checkout's root; the suite's config is in perf/
    assert f"config {checkout / 'perf' / 'specperf.toml'}" in outputs[0], outputs[0]
    assert f"git:{BRANCH}: pushed 3 runs as commit " in outputs[0], outputs[0]
    # every night's runs on the branch, measured in the step's environment
    for key in ("plain/default-c1", "eagle3-5step/default-c1", "eagle3-2step/default-c1"):
        (run,) = history(origin, key)
        assert run["fingerprint"]["environment"]["NCCL_ALGO"] == "Ring", key
    # the dashboard pushed beside them
    assert published_panels(origin) == {
        "plain/default/c1": "1",
        "eagle3-5step/default/c1": "1",
        "eagle3-2step/default/c1": "1",
    }
    assert {"index.html", "suite.html"} <= set(git(origin, "ls-tree", "--name-only", BRANCH).splitlines())
    # what the job uploads exists, and the Markdown summary went to the run's page too
    (upload,) = [s for s in job.steps if s.uses.startswith("actions/upload-artifact")]
    for path in upload.with_value("path").splitlines():
        assert (checkout / path).exists(), path
    assert (checkout / "site" / "index.html").is_file()
    summary = Path(runner.env["GITHUB_STEP_SUMMARY"]).read_text()
    assert "eagle3-5step" in summary and "eagle3-2step" in summary


def test_the_matrix_shards_record_side_by_side_and_the_report_job_merges_and_publishes(tmp_path: Path) -> None:
    jobs = workflow(matrix=True)
    shard_job = next(job for job in jobs.values() if "matrix:" in job.text)
    (report_job,) = [job for job in jobs.values() if job is not shard_job]
    shards = shard_job.matrix("shard")
    assert sorted(shards) == ["eagle3-2step", "eagle3-5step"]  # server configs of the suite
    (shard_step,) = commands(shard_job)
    report_steps = commands(report_job)
    assert [s.run.split()[:2] for s in report_steps if s.run] == [["specperf", "merge"], ["specperf", "dashboard"]]

    token = uuid.uuid4().hex[:12]
    origin = origin_with_the_project(tmp_path, token)
    machines = {shard: Runner(tmp_path, origin, f"gpu-{shard}") for shard in shards}
    running: dict[str, subprocess.Popen[str]] = {}
    try:
        running = {shard: machine.start(shard_step, shard) for shard, machine in machines.items()}
        outputs = {shard: finished(machines[shard], process, shard_step) for shard, process in running.items()}
    finally:
        for process in running.values():
            if process.poll() is None:
                process.kill()
        assert_no_simulator_left(token)
    for output in outputs.values():
        assert f"git:{BRANCH}: pushed 2 runs as commit " in output, output

    # both shards' runs are on the branch: the reference once per shard, each paired with its session
    plain = history(origin, "plain/default-c1")
    spec = [run for shard in shards for run in history(origin, f"{shard}/default-c1")]
    assert len(plain) == 2 and len(spec) == 2
    assert {r["provenance"]["session"] for r in plain} == {r["provenance"]["session"] for r in spec}

    # the artifacts: what each shard's upload step names, where the report job's download step puts them
    (upload,) = [s for s in shard_job.steps if s.uses.startswith("actions/upload-artifact")]
    (download,) = [s for s in report_job.steps if s.uses.startswith("actions/download-artifact")]
    report = Runner(tmp_path, origin, "report")
    for shard, machine in machines.items():
        assert fnmatch.fnmatch(substituted(upload.with_value("name"), shard), download.with_value("pattern"))
        for path in substituted(upload.with_value("path"), shard).splitlines():
            shutil.copy(machine.checkout / path, report.checkout / path)

    merged_output, dashboard_output = (report.run(step) for step in report_steps)
    merged = json.loads((report.checkout / "specperf.json").read_text())
    labels = sorted(row["label"] for row in merged["measurements"])
    assert labels == ["eagle3-2step/default/c1", "eagle3-5step/default/c1", "plain/default/c1", "plain/default/c1"]
    assert "eagle3-5step" in merged_output and "eagle3-2step" in merged_output
    assert re.search(
        rf"git:{BRANCH}: pushed 'specperf: dashboard of 3 keys, newest run [-\d]+' as commit ", dashboard_output
    ), dashboard_output
    assert published_panels(origin) == {
        "plain/default/c1": "2",
        "eagle3-5step/default/c1": "1",
        "eagle3-2step/default/c1": "1",
    }
