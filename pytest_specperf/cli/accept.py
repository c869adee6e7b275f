"""`specperf accept SERVER[/WORKLOAD[/cN]] [--since RUN]`: acknowledge a change, so its runs become the
accepted level, without measuring again.

A REGRESSION nobody accepted stays a REGRESSION every night, "since" the run it began with; an
IMPROVED key stays held against the old level. A team that decides the change is intended (a new
driver, a model swap) accepts it here instead of spending a GPU night on `--specperf-update`: a new
segment starts at the run the change began with, exactly as an update on that night would have
started it, and every run after it counts in the new level. Without `--since`, the run is the one
the newest night's verdict names ("since the run of 2026-11-20"), as `specperf history` marks it "in
force since here"; a key with no change in force is left alone. The run a history began its new level
at carries the acceptance's line (when, and `--note`), which `specperf history` shows.
"""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime

from pytest_specperf.cli.common import OK, opened_store
from pytest_specperf.cli.setup import Setup, StoreArgument, Tolerances, check_tolerances
from pytest_specperf.errors import SpecperfError
from pytest_specperf.store.records import StoredBaseline
from pytest_specperf.verdict.checks import JUDGED_METRICS, Limits
from pytest_specperf.verdict.standing import change_in_force, judge_newest

NOTHING_ACCEPTED = 1


def accept_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("select", metavar="SERVER[/WORKLOAD[/cN]]", help="the key(s) whose change to accept")
    parser.add_argument(
        "--since",
        metavar="RUN",
        help="the run the new level begins with: its number in `specperf history`, its date (YYYY-MM-DD) or its "
        "commit; default: the run the newest night's change began with",
    )
    parser.add_argument("--note", default="", help="why the change is accepted (kept in the history)")


def run_accept(args: argparse.Namespace) -> int:
    check_tolerances(args)
    limits = Limits.tolerating(args.max_regression, args.max_regression_accept_length)
    acceptance = f"accepted {datetime.now(UTC).date().isoformat()} with specperf accept" + (
        f": {args.note}" if args.note else ""
    )
    accepted = 0
    with opened_store(args.store) as store:
        entries = selected(store.entries(), args.select)
        if args.since is not None and args.since.isdigit() and len(entries) > 1:
            keys = ", ".join(e.measurement.key.label for e in entries)
            raise SpecperfError(
                f"--since {args.since}: a run number names a run of one history, and "
                f"{args.select} selects {len(entries)} ({keys}); name a date or a commit"
            )
        for entry in entries:
            label = entry.measurement.key.label
            first = since_run(entry, args.since) if args.since is not None else in_force_run(entry, limits)
            if first is None:
                print(
                    f"{label}: no change in force (the newest night is within the tolerance of the accepted "
                    "level); name a run with --since to accept one anyway"
                )
                continue
            run = entry.runs[first]
            lines = store.accept(entry.path, run.provenance, acceptance)
            joined = len(entry.runs) - first
            print(
                f"{label}: the accepted level is now the {joined} run{'s' if joined != 1 else ''} from "
                f"run {first + 1} on ({run_name(entry, first)}); the runs before stay in the history"
            )
            for line in lines:
                print(line)
            accepted += 1
    return OK if accepted else NOTHING_ACCEPTED


def selected(entries: list[StoredBaseline], select: str) -> list[StoredBaseline]:
    """The histories `SERVER[/WORKLOAD[/cN]]` names; an error listing what there is when none match."""
    wanted = select.strip("/").split("/")
    if len(wanted) > 3 or not wanted[0]:
        raise SpecperfError(f"{select!r}: name a key as SERVER, SERVER/WORKLOAD or SERVER/WORKLOAD/cN")
    found = [e for e in entries if e.measurement.key.label.split("/")[: len(wanted)] == wanted]
    if not found:
        have = ", ".join(e.measurement.key.label for e in entries) or "none"
        raise SpecperfError(f"{select!r}: no stored history matches (the store holds: {have})")
    return found


SETUP = Setup(run_accept, [accept_arguments, StoreArgument(), Tolerances()], description=__doc__.split("\n\n")[1])


def in_force_run(entry: StoredBaseline, limits: Limits) -> int | None:
    """The run the change in force began with, the earliest of the judged metrics' (None: no change)."""
    runs = [
        found.run
        for metric in JUDGED_METRICS
        if (found := change_in_force(entry, metric, judge_newest(entry, metric, limits))) is not None
    ]
    return min(runs) if runs else None


def since_run(entry: StoredBaseline, since: str, option: str = "--since") -> int:
    """The run `since` names in a history (position, oldest 0): its number, or the first run of the one
    night (session) whose date or commit it is; an error naming the candidates otherwise."""
    label = entry.measurement.key.label
    if since.isdigit():
        if not 1 <= int(since) <= len(entry.runs):
            raise SpecperfError(f"{label}: {option} {since}: the history holds runs 1 to {len(entry.runs)}")
        return int(since) - 1
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", since):
        matches = [i for i, r in enumerate(entry.runs) if r.provenance.created.startswith(since)]
    elif re.fullmatch(r"[0-9a-fA-F]{4,40}", since):
        matches = [i for i, r in enumerate(entry.runs) if (r.provenance.git_commit or "").startswith(since.lower())]
    else:
        raise SpecperfError(f"{option} {since!r}: name a run by its number, its date (YYYY-MM-DD) or its commit")
    if not matches:
        raise SpecperfError(f"{label}: {option} {since}: no run of that date or commit in the history")
    nights = {entry.runs[i].provenance.session or i for i in matches}
    if len(nights) > 1:
        listed = ", ".join(str(i + 1) for i in matches)
        raise SpecperfError(
            f"{label}: {option} {since} matches runs of {len(nights)} nights ({listed}); "
            "name one by its number (specperf history)"
        )
    return matches[0]


def run_name(entry: StoredBaseline, index: int) -> str:
    p = entry.runs[index].provenance
    return f"{p.created[:10]}, " + (f"commit {p.git_commit[:7]}" if p.git_commit else "no git commit")
