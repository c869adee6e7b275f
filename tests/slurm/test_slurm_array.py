"""The manual's Slurm job array, run for real: `sbatch` of the script as docs/recipes.md writes it (its
GPU request left out: these nodes have none), two tasks, each recording one shard into one git store (a
bare repository on the shared disk), then the dependent merge job; the dashboard draws both shards. One
task fails its test, and the other's runs are kept all the same."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from suite_tables import SPEC_SERVERS, TINY_WORKLOAD

from pytest_specperf.config.location import StoreLocation
from pytest_specperf.store import open_store

DOCS = Path(__file__).parents[2] / "docs" / "recipes.md"

CONFIG = (
    """
[specperf]
launcher = "sim"
model = "sim/kimi-k2.5-{token}"
sim_time_scale = 0.02
rounds = 2
store = "git:{remote}#specperf-history"
"""
    + SPEC_SERVERS
    + TINY_WORKLOAD
)

#: the 2-step shard fails its test (a speedup no config reaches); its night is still recorded
TESTS = """
import pytest

@pytest.mark.specperf(server="eagle3-5step")
def test_five(specperf):
    pass

@pytest.mark.specperf(server="eagle3-2step", min_speedup=100)
def test_two(specperf):
    pass
"""


def recipe_script() -> str:
    """The job array script of the manual, as written, but for its GPU request."""
    text = DOCS.read_text()
    section = text[text.index("## A Slurm job array") :]
    script = re.search(r"```bash\n(.*?)```", section, re.S)
    assert script is not None, "docs/recipes.md lost its job array script"
    lines = [line for line in script.group(1).splitlines() if not line.startswith("#SBATCH --gres")]
    return "\n".join(lines) + "\n"


def merge_command() -> str:
    """The dependent merge job's `--wrap` command, as the manual writes it."""
    found = re.search(r'--wrap "(specperf merge [^"]+)"', DOCS.read_text().replace("\n", " "))
    assert found is not None, "docs/recipes.md lost its merge job"
    return found.group(1)


def run(*args: str, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_job_array_records_both_shards_into_one_git_store_and_merges_them(tmp_path: Path) -> None:
    remote = tmp_path / "history.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    suite = tmp_path / "suite"
    (suite / "perf").mkdir(parents=True)
    (suite / "specperf.toml").write_text(CONFIG.format(token=tmp_path.name[-8:], remote=remote))
    (suite / "perf" / "test_shards.py").write_text(textwrap.dedent(TESTS))
    (suite / "specperf.sh").write_text(recipe_script())
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # this venv's pytest, specperf
        "SPECPERF_LOCK_DIR": str(tmp_path / "locks"),
        "GIT_AUTHOR_NAME": "ci",
        "GIT_AUTHOR_EMAIL": "ci@example.invalid",
        "GIT_COMMITTER_NAME": "ci",
        "GIT_COMMITTER_EMAIL": "ci@example.invalid",
    }
    array = run("sbatch", "--parsable", "--time=10", "specperf.sh", cwd=suite, env=env).strip().split(";")[0]
    run("sbatch", "--wait", f"--dependency=afterany:{array}", "--wrap", merge_command(), cwd=suite, env=env)

    outputs = [(suite / f"slurm-{array}_{task}.out").read_text() for task in (0, 1)]
    assert re.search(r"\b1 passed\b", outputs[0]) and re.search(r"\b1 failed\b", outputs[1]), outputs
    merged = json.loads((suite / "reports" / "specperf.json").read_text())
    labels = sorted(m["label"] for m in merged["measurements"])
    assert labels == ["eagle3-2step/default/c1", "eagle3-5step/default/c1", "plain/default/c1", "plain/default/c1"]

    store = f"git:{remote}#specperf-history"
    opened = open_store(StoreLocation.parse(store, base=suite, where="store"))
    try:
        opened.prepare()
        entries = {e.measurement.key.label: e.runs for e in opened.entries()}
    finally:
        opened.close()
    sessions = {label: len({r.provenance.session for r in runs}) for label, runs in entries.items()}
    assert sessions == {"plain/default/c1": 2, "eagle3-5step/default/c1": 1, "eagle3-2step/default/c1": 1}
    for label, runs in entries.items():  # every run once (a confirmed REGRESSION is two starts: two runs)
        ids = [r.provenance.run_id for r in runs]
        assert None not in ids and len(set(ids)) == len(ids), label
    run("specperf", "dashboard", "--store", store, "-o", str(tmp_path / "site"), cwd=suite, env=env)
    page = (tmp_path / "site" / "suite.html").read_text()
    assert "eagle3-5step/default/c1" in page and "eagle3-2step/default/c1" in page
