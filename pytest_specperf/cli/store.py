"""`specperf store FILE [--store STORE]`: append the runs a session could not store (its store was full,
read-only or refused the push) to their histories, once the store is fixed. Nothing is measured again:
the runs are appended as the session built them (run id, segment start, status), and a run a history
already holds is not added twice, so running it again is harmless.

`specperf store migrate [--store STORE]`: convert a store written before the append-only layout (one
JSON file per key, rewritten every night) at once, losslessly (store/file.py `migrate`); a git store's
conversion is pushed. The first write of a session does the same; this makes it a step of its own (a
reviewable commit, before the first night that writes)."""

from __future__ import annotations

import argparse
from pathlib import Path

from pytest_specperf.cli.common import OK
from pytest_specperf.cli.setup import DEFAULT_STORE, STORE_FORMS, Setup, StoreArgument
from pytest_specperf.config.location import StoreLocation
from pytest_specperf.errors import SpecperfError
from pytest_specperf.store import open_store
from pytest_specperf.store.records import runs_word
from pytest_specperf.store.unstored import read_unstored


def store_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "file",
        type=Path,
        help="the file of kept runs the session's last line named (<store>/unstored/<date>-<session>/runs.json, "
        "or the same under ~/.cache/pytest-specperf/); or `migrate`: convert the store "
        "(--store, default .specperf) to the append-only layout",
    )


def run_store(args: argparse.Namespace) -> int:
    if args.file == Path(MIGRATE) and not args.file.exists():
        return run_migrate(args.store or DEFAULT_STORE)
    unstored = read_unstored(args.file)
    setting = args.store or unstored.store
    store = open_store(StoreLocation.parse(setting, base=Path.cwd(), where="--store"))
    try:
        for line in store.prepare():
            print(line)
        for pending in unstored.runs:
            store.append(pending.run, new_segment=pending.new_segment, history=unstored.history)
        for line in store.publish():
            print(line)
    finally:
        store.close()
    print(f"{store.location}: stored the {runs_word(unstored.runs)} of {args.file} (runs held before are kept once)")
    return OK


MIGRATE = "migrate"


SETUP = Setup(
    run_store,
    [store_arguments, StoreArgument(default=None, help=f"{STORE_FORMS}; default: the store the session meant")],
)


def run_migrate(setting: str) -> int:
    """Convert the store `setting` names; what was done, one line each."""
    location = StoreLocation.parse(setting, base=Path.cwd(), where="--store")
    if location.path is not None and not location.path.is_dir():
        raise SpecperfError(f"{location.path}: no such store directory")
    store = open_store(location)
    try:
        for line in store.prepare():
            print(line)
        migrate = getattr(store, "migrate", None)
        if migrate is None:
            raise SpecperfError(f"{store.location}: this store keeps no older layout to convert")
        lines = migrate()
    finally:
        store.close()
    for line in lines or [f"{store.location}: nothing to convert (every history is in the append-only layout)"]:
        print(line)
    return OK
