"""A store at a team's scale: 1,000 keys by 365 nights. Bytes on disk, one night's append, the reads a
session and `specperf history` make, the dashboard; for the folder store, the git store and PostgreSQL.

The store is made of a real SGLang night (tests/data/real-nights/sglang-cpu-spec/night1-report.json:
its rounds, its fingerprint, its per-request records) repeated with seeded noise: `--servers` servers
(the first one the reference) by `--workloads` workloads by 4 concurrency levels, `--nights` nights each.
The history files are written as the store's own encoder writes them (store/compact.py `encode_run`, the
bytes an append writes; see `build`); then every figure is measured with the store's own code:

* bytes on disk: the files' sizes, and the blocks they take (`du`); PostgreSQL's tables and indexes;
* one night's append for every key: `FileStore.append` (the folder store), `PostgresStore.append` (a
  transaction each), and for the git store a session's whole path: `prepare` (fetch the branch), append,
  `publish` (commit, push), with what the push added to the remote's objects;
* the histories a 100-key session reads (`load`, the verdict's window);
* `specperf history SERVER/WORKLOAD` of one workload (4 keys), as a user runs it (a fresh process);
* 8 shards appending the next night of every key to PostgreSQL at once, every run counted afterwards;
* `specperf dashboard` of the whole store (`--dashboard`, off by default at full scale: see the docs).

Each time is printed as wall time and CPU time (this process and its children): on a shared machine the
first includes the waits for a core. The figures end with each one against the issue's goal. PostgreSQL
is measured in a fresh database on the server `SPECPERF_POSTGRES_URL` names (dropped afterwards), and left
out with a printed line when it is not set.

Run: ``python benchmarks/store_scale.py [--servers 10] [--workloads 25] [--nights 365] [--dashboard]
[--reuse DIR] [--no-git] [--no-folder]`` (docs/benchmarks.md "Store at scale" shows the figures and the
command that printed them).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import multiprocessing
import os
import random
import resource
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
from pytest_specperf.store.compact import compact_json, encode_run, records_document, rounded
from pytest_specperf.store.file import FileStore
from pytest_specperf.store.git import GitStore
from pytest_specperf.store.postgres import PostgresStore
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
    """The store as `nights` appends would have left it, written in one go per file. Each key's first
    night is encoded by the store's own encoder (`encode_run`, which also writes the shared documents);
    the later nights are that line with their own throughput column, provenance and session, which is
    what `encode_run` writes for them (checked on the first key's second night): fast to make at 1,000
    keys by 365 nights."""
    template = real_night()
    rng = random.Random(20261204)
    store = FileStore(root)
    for number, key in enumerate(all_keys):
        first = night_of(template, key, 0, rng)
        encoded = encode_run(first)
        for relative, text in encoded.documents.items():
            target = root / relative
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
        record = json.loads(encoded.line)["run"]
        column = json.loads((root / f"setups/{record['setup']}.json").read_text())["columns"].index("output_throughput")
        lines, run = [encoded.line], first
        for night in range(1, nights):
            run = night_of(template, key, night, rng)
            record["rounds"][column] = rounded([r.output_throughput for r in run.measurement.rounds])
            record["provenance"] = run.provenance.to_dict()
            line = compact_json({"run": record}) + "\n"
            if number == 0 and night == 1:
                assert line == encode_run(run).line, "the fast build must write what encode_run writes"
            lines.append(line)
        path = store.path_for(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(lines))
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
    """The block's wall time as `label`, and the CPU time this process and its children spent in it as
    `label` + ``_cpu``: on a shared machine the wall time includes the waits for a CPU, the CPU time not."""
    started, cpu = time.perf_counter(), _cpu()
    yield
    results[label] = time.perf_counter() - started
    results[f"{label}_cpu"] = _cpu() - cpu


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def said(results: dict[str, float], label: str) -> str:
    return f"{results[label]:.2f} s (CPU {results[label + '_cpu']:.2f} s)"


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


def folder_figures(root: Path, all_keys: list[MeasurementKey], nights: int, dashboard: bool) -> dict[str, float]:
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
    print(f"  one night's append for {len(all_keys)} keys: {said(results, 'append')}")
    session = all_keys[:100]
    with timed("load", results):
        for key in session:
            assert store.load(key) is not None
    print(f"  the histories a {len(session)}-key session reads (load): {said(results, 'load')}")
    history_figure(str(root), results)
    if dashboard:
        site = root.parent / "site"
        before = os.getloadavg()[0]
        with timed("dashboard", results):
            code, _ = quiet(["dashboard", "--store", str(root), "-o", str(site)])
        assert code == 0
        share = results["dashboard_cpu"] / results["dashboard"]
        print(
            f"  load average (1 min) {before:.1f} before the dashboard, {os.getloadavg()[0]:.1f} after; "
            f"it kept {share:.2f} CPUs busy on {os.cpu_count()}"
        )
        sizes = ", ".join(f"{p.name} {p.stat().st_size / 2**20:.2f} MiB" for p in sorted(site.glob("*.html")))
        keys = [p.stat().st_size for p in (site / "keys").glob("*.html")]  # a page per key, for a large store
        if keys:
            sizes += f", keys/: {len(keys)} pages, {sum(keys) / 2**20:.0f} MiB, the largest {max(keys) / 2**20:.2f} MiB"
        print(f"  specperf dashboard: {said(results, 'dashboard')}; {sizes}")
    return results


def history_figure(store: str, results: dict[str, float], workload: str = "plain/workload-00") -> None:
    """`specperf history` of one workload (its 4 levels: the narrowest selection the command takes) as a
    user runs it, a fresh process, imports included; and in this process once its modules are imported."""
    command = [sys.executable, "-c", "import sys; from pytest_specperf.cli import main; sys.exit(main())"]
    with timed("history", results):
        done = subprocess.run([*command, "history", workload, "--store", store], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    quiet(["history", workload, "--store", store])  # the modules imported
    with timed("history_warm", results):
        code, _ = quiet(["history", workload, "--store", store])
    assert code == 0
    print(
        f"  specperf history {workload} ({len(LEVELS)} keys, {done.stdout.count(chr(10))} lines): "
        f"{said(results, 'history')} as a command, {said(results, 'history_warm')} once its modules are imported"
    )


def git_figures(root: Path, all_keys: list[MeasurementKey], nights: int, scratch: Path) -> dict[str, float]:
    """Two sessions, one night each, on a branch that holds `root`. Past 32 nights (store/parts.py) the
    first is the night a history an earlier release wrote in one file starts its first part, the second
    an ordinary night (each key's line appended to its last part); the goals are held against the second."""
    remote = seeded_remote(root, scratch)
    before = objects_bytes(remote)
    print(f"git store: the branch packed in the remote: {before / 2**20:.1f} MiB")
    results: dict[str, float] = {}
    for session in range(2):
        what = f"night {nights + session + 1}"
        results = git_session(remote, scratch / f"work-{session}", all_keys, nights + session, session)
        received = objects_bytes(remote) - before
        git(remote, "repack", "-a", "-d", "--quiet")  # as a server packs it: the thin pack's bases not twice
        added, before = objects_bytes(remote) - before, objects_bytes(remote)
        print(
            f"  {what}: fetch {said(results, 'prepare')}, one night's append for {len(all_keys)} keys "
            f"{said(results, 'append')}, commit and push {said(results, 'publish')}; the push added "
            f"{received / 2**20:.2f} MiB to the remote's objects as received (a thin pack completed with its "
            f"delta bases), {added / 2**20:.2f} MiB once packed (git repack -ad): {added / len(all_keys):.0f} B per key"
        )
    print(f"  the histories a 100-key session reads (load, from the fetched work tree): {said(results, 'load')}")
    night = {name: results[name] + results[f"publish{cpu}"] for cpu in ("", "_cpu") for name in (f"append{cpu}",)}
    return {**results, **night}


def seeded_remote(root: Path, scratch: Path) -> Path:
    """A bare repository whose branch holds the store in `root` (one commit), packed."""
    remote = scratch / "remote.git"
    git(scratch, "init", "--quiet", "--bare", str(remote))
    seed = scratch / "seed"
    git(scratch, "init", "--quiet", str(seed))
    shutil.copytree(root, seed, dirs_exist_ok=True)
    git(seed, "add", "--all")
    git(seed, "commit", "--quiet", "-m", "the histories")
    git(seed, "push", "--quiet", str(remote), f"HEAD:refs/heads/{BRANCH}")
    git(remote, "repack", "-a", "-d", "-f", "--quiet")
    return remote


def git_session(remote: Path, work: Path, all_keys: list[MeasurementKey], night: int, seed: int) -> dict[str, float]:
    """One session's whole path on the git store: fetch, append a night for every key, commit and push;
    then the reads of a 100-key session from the fetched work tree."""
    results: dict[str, float] = {}
    template, rng = real_night(), random.Random(8 + seed)
    tonight = [night_of(template, key, night, rng) for key in all_keys]
    location = StoreLocation.parse(f"git:{remote}#{BRANCH}", base=work.parent, where="bench")
    store = GitStore(location, work_dir=work)
    with timed("prepare", results):
        store.prepare()
    with timed("append", results):
        for run in tonight:
            store.append(run, new_segment=False)
    with timed("publish", results):
        pushed = store.publish()
    assert pushed and "pushed" in pushed[-1], pushed
    with timed("load", results):
        for key in all_keys[:100]:
            assert store.load(key) is not None
    store.close()
    return results


def postgres_figures(root: Path, all_keys: list[MeasurementKey], nights: int, url: str) -> dict[str, float]:
    """The same histories in a fresh database on the server `url` names (dropped afterwards): loaded
    row for row from the folder store (each line a row, as `PostgresStore.append` writes it), then a
    night appended, a session's reads, `specperf history`, and 8 shards appending a night at once."""
    import psycopg

    name = f"specperf_bench_{os.getpid()}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    database = url.rsplit("/", 1)[0] + f"/{name}"
    try:
        return _postgres_figures(root, all_keys, nights, database)
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _postgres_figures(root: Path, all_keys: list[MeasurementKey], nights: int, database: str) -> dict[str, float]:
    store = PostgresStore(StoreLocation.parse(database, base=root, where="bench"))
    store.prepare()
    started = time.perf_counter()
    copy_into(store, root)
    print(f"PostgreSQL: {len(all_keys)} keys x {nights} nights (copied in in {time.perf_counter() - started:.0f} s)")
    size = store_size(store)
    per_night = size / (len(all_keys) * nights)
    print(f"  on disk: {size / 2**20:.1f} MiB of tables and indexes ({per_night:.0f} B per night per key)")
    results: dict[str, float] = {}
    template, rng = real_night(), random.Random(9)
    tonight = [night_of(template, key, nights, rng) for key in all_keys]
    with timed("append", results):
        for run in tonight:
            store.append(run, new_segment=False)
    print(f"  one night's append for {len(all_keys)} keys (a transaction each): {said(results, 'append')}")
    with timed("load", results):
        for key in all_keys[:100]:
            assert store.load(key) is not None
    print(f"  the histories a 100-key session reads (load): {said(results, 'load')}")
    history_figure(database, results)
    store.close()
    shards(database, all_keys, nights)
    return results


def copy_into(store: PostgresStore, root: Path) -> None:
    """The folder store's documents, lines and records as the PostgreSQL store's rows (COPY)."""
    connection = store._connection
    with connection.transaction(), connection.cursor() as cursor:
        with cursor.copy("COPY specperf_documents (kind, digest, body) FROM STDIN") as copy:
            for kind in ("fingerprints", "setups"):
                for document in sorted((root / kind).glob("*.json")):
                    copy.write_row((kind, document.stem, document.read_text()))
        columns = "layer, server, workload, concurrency, run, segment, line"
        with cursor.copy(f"COPY specperf_runs ({columns}) FROM STDIN") as copy:
            for path in sorted(root.glob("*/*.jsonl")):
                workload, _, level = path.name.removesuffix(".jsonl").rpartition("-c")
                for line in path.read_text().splitlines():
                    run = json.loads(line)["run"]
                    ident = run["provenance"]["run_id"]
                    copy.write_row(("", path.parent.name, workload, int(level), ident, run["segment"], line))
        with cursor.copy("COPY specperf_records (layer, server, workload, concurrency, run, body) FROM STDIN") as copy:
            for path in sorted(root.glob("*/*.records.json")):
                workload, _, level = path.name.removesuffix(".records.json").rpartition("-c")
                body = path.read_text().strip()
                copy.write_row(("", path.parent.name, workload, int(level), json.loads(body)["run"], body))
    connection.execute("ANALYZE")
    connection.commit()


def store_size(store: PostgresStore) -> int:
    with store._connection.cursor() as cursor:
        cursor.execute(
            "SELECT sum(pg_total_relation_size(t)) FROM unnest(%s::text[]) AS t",
            (["specperf_documents", "specperf_runs", "specperf_records"],),
        )
        row = cursor.fetchone()
    store._connection.commit()
    return int(row[0]) if row and row[0] is not None else 0


SHARDS = 8


def _shard(database: str, shard: int, all_keys: list[MeasurementKey], nights: int) -> None:
    """One shard's night: its share of the keys, and one run into a key every shard writes."""
    store = PostgresStore(StoreLocation.parse(database, base=Path.cwd(), where="bench"))
    store.prepare()
    template, rng = real_night(), random.Random(100 + shard)
    for key in all_keys[shard::SHARDS]:
        store.append(night_of(template, key, nights + 1, rng), new_segment=False)
    shared = MeasurementKey("shared", "workload-00", 1)
    store.append(night_of(template, shared, nights + 1 + shard, rng), new_segment=False)
    store.close()


def shards(database: str, all_keys: list[MeasurementKey], nights: int) -> None:
    """8 processes appending the next night of every key at once (and one shared key): every run kept, once."""
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_shard, args=(database, s, all_keys, nights)) for s in range(SHARDS)]
    started = time.perf_counter()
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    wall = time.perf_counter() - started
    assert [p.exitcode for p in processes] == [0] * SHARDS
    store = PostgresStore(StoreLocation.parse(database, base=Path.cwd(), where="bench"))
    store.prepare()
    with store._connection.cursor() as cursor:
        cursor.execute("SELECT server = 'shared', count(*) FROM specperf_runs GROUP BY server = 'shared' ORDER BY 1")
        counts = dict(cursor.fetchall())
    store._connection.commit()
    expected = len(all_keys) * (nights + 2)
    kept = counts.get(False, 0) == expected and counts.get(True, 0) == SHARDS
    shared = store.load(MeasurementKey("shared", "workload-00", 1))
    store.close()
    assert shared is not None and len({r.provenance.run_id for r in shared.runs}) == SHARDS
    print(
        f"  {SHARDS} shards appending the next night of all {len(all_keys)} keys at once (and one key every shard "
        f"writes): {wall:.2f} s with their start-up; {counts.get(False, 0)} runs of {expected} and "
        f"{counts.get(True, 0)} of {SHARDS} in the shared key: {'nothing lost' if kept else 'RUNS LOST'}"
    )
    assert kept


GOALS = (  # (figure, goal in seconds, what it is)
    ("append", 10.0, "one night's append for 1,000 keys"),
    ("load", 2.0, "the histories a 100-key session reads"),
    ("history", 1.0, "specperf history of one key"),
    ("dashboard", 60.0, "specperf dashboard"),
)
#: figures that grow with the keys, scaled to 1,000 keys when fewer were measured
PER_KEY = ("append", "dashboard")


def against_goals(store: str, figures: dict[str, float], keys_measured: int) -> None:
    """Each figure against its goal, wall and CPU time, the append and the dashboard scaled to 1,000 keys by
    their per-key time
    (the git store's append is its whole night: the appends, the commit and the push)."""
    for name, goal, what in GOALS:
        if name not in figures:
            continue
        scale = 1000 / keys_measured if name in PER_KEY else 1.0
        wall, cpu = figures[name] * scale, figures[f"{name}_cpu"] * scale
        scaled = f" (scaled from {keys_measured} keys)" if scale != 1.0 else ""
        verdict = "met" if wall <= goal else ("met in CPU time" if cpu <= goal else "NOT met")
        print(f"  {store}: {what}: {wall:.2f} s, CPU {cpu:.2f} s{scaled}; goal <= {goal:g} s: {verdict}")


def made(root: Path, all_keys: list[MeasurementKey], nights: int, reuse: Path | None) -> Path:
    """The pristine store: built in a scratch folder, or kept in `reuse` (built there once)."""
    target = reuse if reuse is not None else root
    if reuse is None or not (reuse / "fingerprints").is_dir():
        started = time.perf_counter()
        build(target, all_keys, nights)
        print(f"(made the store in {time.perf_counter() - started:.0f} s)")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", type=int, default=10)
    parser.add_argument("--workloads", type=int, default=25)
    parser.add_argument("--nights", type=int, default=365)
    parser.add_argument("--dashboard", action="store_true", help="also time `specperf dashboard`")
    parser.add_argument("--no-git", action="store_true", help="leave out the git store")
    parser.add_argument("--no-folder", action="store_true", help="leave out the folder store")
    parser.add_argument("--no-postgres", action="store_true", help="leave out PostgreSQL")
    parser.add_argument("--reuse", type=Path, help="keep the built store in this folder and use it next time")
    args = parser.parse_args()
    all_keys = keys(args.servers, args.workloads)
    print(f"load average at the start: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    figures: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        pristine = made(scratch / "built", all_keys, args.nights, args.reuse)
        root = scratch / "store"
        shutil.copytree(pristine, root)
        if not args.no_folder:
            figures["folder store"] = folder_figures(root, all_keys, args.nights, args.dashboard)
        if not args.no_git:
            figures["git store"] = git_figures(pristine, all_keys, args.nights, scratch)
        url = "" if args.no_postgres else os.environ.get("SPECPERF_POSTGRES_URL", "")
        if url:
            figures["PostgreSQL"] = postgres_figures(pristine, all_keys, args.nights, url)
        elif args.no_postgres:
            print("PostgreSQL: left out (--no-postgres)")
        else:
            print('PostgreSQL: left out, SPECPERF_POSTGRES_URL is not set (eval "$(bash .ci/postgres up)")')
    print(f"against the goals (1,000 keys x 365 nights; measured: {len(all_keys)} keys x {args.nights} nights):")
    for store, measured in figures.items():
        against_goals(store, measured, len(all_keys))


if __name__ == "__main__":
    sys.exit(main())
