"""A store at a team's scale: 1,000 keys by 365 nights. Bytes on disk, one night's append, the reads a
session and `specperf history` make, the dashboard; for the folder store and the git store.

The store is made of a real SGLang night (tests/data/real-nights/sglang-cpu-spec/night1-report.json:
its rounds, its fingerprint, its per-request records) repeated with seeded noise: `--servers` servers
(the first one the reference) by `--workloads` workloads by 4 concurrency levels, `--nights` nights each.
The history files are written with the store's own encoder (store/compact.py `encode_run`, the bytes
an append writes); then every figure is measured with the store's own code:

* bytes on disk: the files' sizes, and the blocks they take (`du`);
* one night's append for every key: `FileStore.append` (the folder store), and for the git store a
  session's whole path: `prepare` (fetch the branch), append, `publish` (commit, push), with what the
  push added to the remote's objects;
* the histories a 100-key session reads (`load`, the verdict's window);
* `specperf history SERVER/WORKLOAD` of one workload (4 keys), as a user runs it;
* `specperf dashboard` of the whole store (`--dashboard`, off by default at full scale: see the docs).

Run: ``python benchmarks/store_scale.py [--servers 10] [--workloads 25] [--nights 365] [--dashboard]``
(docs/benchmarks.md "Store at scale" shows the figures and the command that printed them).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from pytest_specperf.cli import main as specperf
from pytest_specperf.config.location import StoreLocation
from pytest_specperf.measure.fingerprint import Fingerprint
from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.store.compact import encode_run, records_document
from pytest_specperf.store.file import FileStore
from pytest_specperf.store.git import GitStore
from pytest_specperf.store.records import StoredRun, new_run

NIGHT = (
    Path(__file__).resolve().parents[1] / "tests" / "data" / "real-nights" / "sglang-cpu-spec" / "night1-report.json"
)
LEVELS = (1, 2, 4, 8)
BRANCH = "specperf-history"


def real_night() -> Measurement:
    report = json.loads(NIGHT.read_text())
    row = next(m for m in report["measurements"] if m["server"] == "ngram")
    return Measurement.from_dict(row, fingerprint=Fingerprint.from_dict(row["fingerprint"]))


def keys(servers: int, workloads: int) -> list[MeasurementKey]:
    names = ["plain", *(f"spec-{i}" for i in range(1, servers))]
    return [MeasurementKey(s, f"workload-{w:02d}", c) for s in names for w in range(workloads) for c in LEVELS]


def night_of(template: Measurement, key: MeasurementKey, night: int, rng: random.Random) -> StoredRun:
    """`template` as `key`'s run of `night`: its rounds scaled by a seeded night-to-night and round noise."""
    level = rng.gauss(1.0, 0.015)
    rounds = [
        dataclasses.replace(r, output_throughput=r.output_throughput * level * rng.gauss(1.0, 0.004))
        for r in template.rounds
    ]
    identity = {**(template.fingerprint.identity if template.fingerprint else {}), "server": key.server}
    fingerprint = Fingerprint(identity, dict(template.fingerprint.environment) if template.fingerprint else {})
    measurement = dataclasses.replace(
        template, key=key, rounds=rounds, fingerprint=fingerprint, is_reference=key.server == "plain"
    )
    run = new_run(measurement, suite_dir=None, session=f"night-{night:03d}")
    created = f"2026-{1 + night // 31 % 12:02d}-{1 + night % 28:02d}T02:00:00+00:00"
    return dataclasses.replace(run, provenance=dataclasses.replace(run.provenance, created=created))


def build(root: Path, all_keys: list[MeasurementKey], nights: int) -> None:
    """The store as `nights` appends would have left it, written in one go per file (fast to make)."""
    template = real_night()
    rng = random.Random(20261204)
    store = FileStore(root)
    for key in all_keys:
        path = store.path_for(key)
        lines = []
        run = None
        for night in range(nights):
            run = night_of(template, key, night, rng)
            encoded = encode_run(run)
            lines.append(encoded.line)
            for relative, text in encoded.documents.items():
                target = root / relative
                if not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(text)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(lines))
        assert run is not None
        path.with_name(path.name.removesuffix(".jsonl") + ".records.json").write_text(
            json.dumps(records_document(run), separators=(",", ":")) + "\n"
        )


def disk(root: Path) -> tuple[int, int]:
    """(the files' bytes, the bytes of the blocks they take)."""
    files = sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and ".git" not in p.parts)
    used = int(subprocess.run(["du", "-sk", str(root)], capture_output=True, text=True).stdout.split()[0]) * 1024
    return files, used


@contextlib.contextmanager
def timed(label: str, results: dict[str, float]) -> Iterator[None]:
    started = time.perf_counter()
    yield
    results[label] = time.perf_counter() - started


def quiet(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = specperf(argv)
    return code, out.getvalue()


def git(cwd: Path, *args: str) -> str:
    env = ["-c", "user.name=bench", "-c", "user.email=bench@example.com", "-c", "commit.gpgsign=false"]
    return subprocess.run(["git", *env, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def objects_bytes(repository: Path) -> int:
    return sum(p.stat().st_size for p in (repository / "objects").rglob("*") if p.is_file())


def folder_figures(root: Path, all_keys: list[MeasurementKey], nights: int, dashboard: bool) -> None:
    files, used = disk(root)
    runs = len(all_keys) * nights
    print(f"folder store: {len(all_keys)} keys x {nights} nights = {runs} runs")
    per_night = files / runs
    print(
        f"  on disk: {files / 2**20:.1f} MiB in files ({per_night:.0f} B per night per key), "
        f"{used / 2**20:.1f} MiB of blocks"
    )
    results: dict[str, float] = {}
    template, rng = real_night(), random.Random(7)
    tonight = [night_of(template, key, nights, rng) for key in all_keys]
    store = FileStore(root)
    with timed("append", results):
        for run in tonight:
            store.append(run, new_segment=False)
    print(f"  one night's append for {len(all_keys)} keys: {results['append']:.2f} s")
    session = all_keys[:100]
    with timed("load", results):
        for key in session:
            assert store.load(key) is not None
    print(f"  the histories a {len(session)}-key session reads (load): {results['load']:.2f} s")
    workload = f"{all_keys[0].server}/{all_keys[0].workload}"
    with timed("history", results):
        code, out = quiet(["history", workload, "--store", str(root)])
    assert code == 0
    print(f"  specperf history {workload} ({len(LEVELS)} keys, {out.count(chr(10))} lines): {results['history']:.2f} s")
    if dashboard:
        site = root.parent / "site"
        with timed("dashboard", results):
            code, _ = quiet(["dashboard", "--store", str(root), "-o", str(site)])
        sizes = ", ".join(f"{p.name} {p.stat().st_size / 2**20:.1f} MiB" for p in sorted(site.glob("*.html")))
        print(f"  specperf dashboard: {results['dashboard']:.1f} s; {sizes}")


def git_figures(root: Path, all_keys: list[MeasurementKey], nights: int, scratch: Path) -> None:
    remote = scratch / "remote.git"
    git(scratch, "init", "--quiet", "--bare", str(remote))
    seed = scratch / "seed"
    git(scratch, "init", "--quiet", str(seed))
    shutil.copytree(root, seed, dirs_exist_ok=True)
    git(seed, "add", "--all")
    git(seed, "commit", "--quiet", "-m", "the histories")
    git(seed, "push", "--quiet", str(remote), f"HEAD:refs/heads/{BRANCH}")
    git(remote, "repack", "-a", "-d", "-f", "--quiet")
    before = objects_bytes(remote)
    print(f"git store: the branch packed in the remote: {before / 2**20:.1f} MiB")
    results: dict[str, float] = {}
    template, rng = real_night(), random.Random(8)
    tonight = [night_of(template, key, nights, rng) for key in all_keys]
    location = StoreLocation.parse(f"git:{remote}#{BRANCH}", base=scratch, where="bench")
    store = GitStore(location, work_dir=scratch / "work")
    with timed("prepare", results):
        store.prepare()
    with timed("append", results):
        for run in tonight:
            store.append(run, new_segment=False)
    with timed("publish", results):
        said = store.publish()
    store.close()
    received = objects_bytes(remote) - before
    git(remote, "repack", "-a", "-d", "-f", "--quiet")
    added = objects_bytes(remote) - before
    print(
        f"  a session: fetch {results['prepare']:.2f} s, one night's append for {len(all_keys)} keys "
        f"{results['append']:.2f} s, commit and push {results['publish']:.2f} s ({said[-1]})"
    )
    once = f"{added / 2**20:.2f} MiB once repacked (git repack -adf): {added / len(all_keys):.0f} B per key"
    print(
        f"  the push added {received / 2**20:.2f} MiB to the remote's objects as received (a thin pack completed "
        f"with its delta bases), {once}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", type=int, default=10)
    parser.add_argument("--workloads", type=int, default=25)
    parser.add_argument("--nights", type=int, default=365)
    parser.add_argument("--dashboard", action="store_true", help="also time `specperf dashboard`")
    parser.add_argument("--no-git", action="store_true", help="leave out the git store")
    args = parser.parse_args()
    all_keys = keys(args.servers, args.workloads)
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        root = scratch / "store"
        started = time.perf_counter()
        build(root, all_keys, args.nights)
        print(f"(made the store in {time.perf_counter() - started:.0f} s)")
        pristine = scratch / "pristine"
        if not args.no_git:
            shutil.copytree(root, pristine)
        folder_figures(root, all_keys, args.nights, args.dashboard)
        if not args.no_git:
            git_figures(pristine, all_keys, args.nights, scratch)


if __name__ == "__main__":
    sys.exit(main())
