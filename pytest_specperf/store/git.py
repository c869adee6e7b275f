"""The git store: histories on a branch that every machine recording into them shares.

Why: a nightly job runs on ephemeral runners, often as shards on several machines. A history kept
in the job's workspace is gone the next night unless someone persists it, and two jobs that finish
at once overwrite each other's hand-written persistence. A branch of a git repository lives outside
the runners, is reviewable, and git already carries the credentials a CI job may push with
(github-action-benchmark keeps its series on a branch the same way).

How a session uses it:

* `prepare` (before any server starts): ``git ls-remote`` says whether the remote can be reached
  and where the branch is; the branch is fetched into a work tree of the store's own: a linked work
  tree of the suite's repository (``git worktree add --detach``, so git's configuration and
  credentials for that repository apply; the user's checkout, index and branches are never touched)
  or, for a suite outside any repository, a repository of its own. An unreachable remote is a
  `StoreError` here, not after an hour of measuring; with `offline_store` set, the session reads and
  records that local directory instead, and says so.
* `load`, `entries`, `save`: the file store's layout in the work tree (store/file.py).
* `publish` (after the last save): one commit of the appended runs ("specperf: record 14 runs of
  perf 2026-12-01, commit abc1234") on top of the fetched branch, pushed without force. When the push
  fails and the branch has moved, another job pushed first: fetch its commit, append this session's
  runs again on top (histories are append-only per key: a merge of runs, not of text; a run whose id
  is already there is not added twice) and push again, at most `PUSH_ATTEMPTS` times. A failure for
  any other reason (credentials, a protected branch) is a `StoreError` naming it, and the work tree
  with the commit is kept.
* `close`: the work tree is removed (kept when a push failed, so nothing is lost).

pytest-xdist workers read the work tree the controller fetched (`follower`), and never push.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from subprocess import CompletedProcess

from pytest_specperf.common.redact import redact_text
from pytest_specperf.config.location import StoreLocation
from pytest_specperf.errors import StoreError
from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.store.file import LOCK_NAME, FileStore
from pytest_specperf.store.gitcmd import NETWORK_TIMEOUT_S, Git, GitError, first_error
from pytest_specperf.store.records import (
    DEFAULT_HISTORY,
    Provenance,
    SaveResult,
    StoredBaseline,
    StoredRun,
    new_run,
)

#: Pushes a session tries before giving up on a branch other jobs keep moving.
PUSH_ATTEMPTS = 10


@dataclass(frozen=True)
class _Append:
    """A run this session appended, and how: what is re-applied on top of another job's push."""

    run: StoredRun
    new_segment: bool
    history: int


class GitStore:
    """The histories on `location.branch`; the work tree is `work_dir` (a temporary one when None)."""

    def __init__(self, location: StoreLocation, *, work_dir: Path | None = None, follower: bool = False) -> None:
        if location.branch is None:
            raise ValueError(f"not a git store: {location}")
        self.spec = location
        self.branch = location.branch
        self._follower = follower
        self._owned: Path | None = None
        if work_dir is None:
            self._owned = Path(tempfile.mkdtemp(prefix="specperf-history-"))
            work_dir = self._owned / "history"
        self.work_dir = Path(work_dir)
        self._remote = location.url or "origin"
        self._git = Git(self.work_dir)
        self._repository_found: Path | None = None  # the git repository the suite is in
        self._repository: Path | None = None  # the same, once the work tree is one of its work trees
        self._base: str | None = None  # the branch's commit the work tree holds; None: the branch does not exist yet
        self._prepared = follower
        self._offline = False
        self._keep = False
        self._appended: list[_Append] = []
        self._files = FileStore(self._followed_dir() if follower else self.work_dir)

    @property
    def location(self) -> str:
        return str(self.spec)

    @property
    def title(self) -> str:
        """The repository and the branch: `suite specperf-history`."""
        url = self.spec.url
        repository = Path(url.rstrip("/")).name.removesuffix(".git") if url else Path.cwd().name
        return f"{repository} {self.branch}"

    @property
    def root(self) -> Path:
        return self._files.root

    def _followed_dir(self) -> Path:
        """What the controller prepared: its work tree, or the offline store when it could not fetch."""
        if (self.work_dir / ".git").exists() or self.spec.offline is None:
            return self.work_dir
        return self.spec.offline

    # ---- reading ----------------------------------------------------------------------------

    def prepare(self) -> list[str]:
        """Fetch the branch into the work tree; warnings for the report (the offline fallback)."""
        if self._prepared:
            return []
        self._prepared = True
        self.work_dir.parent.mkdir(parents=True, exist_ok=True)
        self._repository_found = self._suite_repository()
        outside = self._outside_runner()
        try:
            tip = self._remote_tip(outside)
        except GitError as exc:
            return self._go_offline(str(exc))
        self._make_work_tree()
        atexit.register(self.close)  # a pytest session ends with its process; `close` earlier is fine
        try:
            if tip is not None:
                self._checkout()
        except StoreError:
            self.close()
            raise
        return []

    def check_writable(self) -> None:
        """The folder the runs are appended in (the work tree, or `offline_store` when the remote cannot be
        reached) can be written. Whether the branch may be pushed to is known only by pushing: a refused
        push keeps the runs committed in the work tree and says so (`publish`)."""
        self.prepare()
        if not self._follower:
            self._files.check_writable()

    def load(self, key: MeasurementKey, *, simulated: bool = False) -> StoredBaseline | None:
        self.prepare()
        return self._files.load(key, simulated=simulated)

    def entries(self) -> list[StoredBaseline]:
        self.prepare()
        return self._files.entries()

    def histories_of(self, server: str = "", workload: str = "") -> list[StoredBaseline]:
        """`FileStore.histories_of` in the fetched branch."""
        self.prepare()
        return self._files.histories_of(server, workload)

    def _outside_runner(self) -> Git:
        """git where the remote is known: the suite's repository for `origin`, anywhere for a URL."""
        repository = self._repository_found
        if self.spec.url is not None:
            return Git(repository or self.work_dir.parent)
        if repository is None:
            raise StoreError(
                f"{self.location}: the suite ({self.spec.base}) is not in a git repository, so it has no origin "
                "to keep the branch on; name the repository: git:<url>#<branch>"
            )
        if Git(repository)("remote", "get-url", "origin", check=False).returncode != 0:
            raise StoreError(
                f"{self.location}: the suite's repository {repository} has no remote named origin; add one, "
                "or name the repository: git:<url>#<branch>"
            )
        return Git(repository)

    def _suite_repository(self) -> Path | None:
        base = self.spec.base or Path.cwd()
        if not base.is_dir():
            return None
        done = Git(base)("rev-parse", "--show-toplevel", check=False)
        return Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else None

    def _remote_tip(self, git: Git) -> str | None:
        """The branch's commit on the remote; None when the remote has no such branch (yet)."""
        ref = f"refs/heads/{self.branch}"
        done = git("ls-remote", "--exit-code", self._remote, ref, timeout=NETWORK_TIMEOUT_S, check=False)
        if done.returncode == 2:
            return None
        if done.returncode != 0:
            raise GitError(first_error(done.stderr) or f"git ls-remote exited with status {done.returncode}")
        tips = [line.split()[0] for line in done.stdout.splitlines() if line.split()[1:] == [ref]]
        return tips[0] if tips else None

    def _go_offline(self, reason: str) -> list[str]:
        if self.spec.offline is None:
            raise StoreError(
                f"{self.location}: cannot reach the remote ({reason}); nothing was measured. Check the network and "
                "git's credentials for it, or set `offline_store` (config) to record in a local directory while "
                "the remote is unreachable"
            )
        self._offline = True
        self._files = FileStore(self.spec.offline)
        return [
            f"{self.location}: the remote cannot be reached ({reason}); histories are read from and recorded in "
            f"the local store {self.spec.offline} (offline_store), not in the shared history"
        ]

    def _make_work_tree(self) -> None:
        """A linked work tree of the suite's repository (its git configuration applies), else a repository."""
        repository = self._repository_found
        if repository is not None:
            add = Git(repository)("worktree", "add", "--detach", "--no-checkout", str(self.work_dir), check=False)
            if add.returncode == 0:
                self._repository = repository
                return
            if self.spec.url is None:
                raise StoreError(
                    f"{self.location}: cannot add a work tree to the suite's repository {repository} "
                    f"({first_error(add.stderr)}); name the repository instead: git:<url>#<branch>"
                )
        Git(self.work_dir.parent)("init", "--quiet", str(self.work_dir))

    def _checkout(self) -> None:
        """The branch as it is on the remote now, in the work tree (nothing else left in it)."""
        ref = f"refs/heads/{self.branch}"
        self._git("fetch", "--quiet", "--no-tags", "--refmap=", self._remote, ref, timeout=NETWORK_TIMEOUT_S)
        self._git("checkout", "--quiet", "--force", "--detach", "FETCH_HEAD")
        self._git("clean", "--quiet", "--force", "-d")
        self._base = self._git.out("rev-parse", "HEAD")

    # ---- recording --------------------------------------------------------------------------

    def save(
        self,
        measurement: Measurement,
        *,
        suite_dir: Path | None,
        new_segment: bool = True,
        history: int = DEFAULT_HISTORY,
        session: str | None = None,
        status: str = "accepted",
    ) -> SaveResult:
        """Append to the history in the work tree; `publish` commits and pushes every run appended."""
        run = new_run(measurement, suite_dir=suite_dir, session=session, status=status)
        return self.append(run, new_segment=new_segment, history=history)

    def append(self, run: StoredRun, *, new_segment: bool = True, history: int = DEFAULT_HISTORY) -> SaveResult:
        """Append a built run to the history in the work tree; `publish` commits and pushes it."""
        self.prepare()
        result = self._files.append(run, new_segment=new_segment, history=history)
        if not self._offline:
            self._appended.append(_Append(run, new_segment, history))
        return result

    def publish(self) -> list[str]:
        """Commit and push the appended runs; on another job's push first, merge runs and push again.
        The lines also say when the first append converted the branch's histories (`FileStore.migrate`)."""
        notes = self._said(self._files.notes())
        if self._follower or not self._appended:
            return notes
        count = f"{len(self._appended)} run{'s' if len(self._appended) != 1 else ''}"
        pushed = self._push(lambda: None, self._message, count)
        if pushed is None:
            return [*notes, f"{self.location}: the {count} were on the branch already (an earlier push reached it)"]
        commit, attempt = pushed
        again = f", after {attempt - 1} push(es) by other jobs came first (their runs are kept)"
        return [*notes, f"{self.location}: pushed {count} as commit {commit[:7]}" + (again if attempt > 1 else "")]

    def _said(self, lines: list[str]) -> list[str]:
        """The work tree's lines as the store's: named by the branch, not by a temporary folder."""
        where = self._files.location
        return [f"{self.location}{line[len(where) :]}" if line.startswith(where) else line for line in lines]

    def migrate(self) -> list[str]:
        """Convert the branch's histories to the append-only layout (`FileStore.migrate`) and push that at
        once, never forced; when another job pushed first, the conversion is made again on top of it."""
        self.prepare()
        if self._offline:
            raise StoreError(f"{self.location}: the remote cannot be reached; nothing was converted")
        said: list[str] = []

        def apply() -> None:
            said[:] = self._said(self._files.migrate())

        message = "specperf: convert the histories to the append-only layout\n"
        pushed = self._push(apply, lambda: message, "conversion")
        if pushed is None:
            return [f"{self.location}: nothing to convert (every history is in the append-only layout)"]
        commit, attempt = pushed
        again = f", after {attempt - 1} push(es) by other jobs came first" if attempt > 1 else ""
        return [*said, f"{self.location}: pushed the conversion as commit {commit[:7]}{again}"]

    def accept(self, path: Path, first: Provenance, acceptance: str) -> list[str]:
        """Accept a history from its run `first` on (`FileStore.accept`) and push it at once, never forced:
        when another job pushed first, the acceptance is made again on top of its runs."""
        self.prepare()
        if self._offline:
            raise StoreError(f"{self.location}: the remote cannot be reached; nothing was accepted")
        relative = path.relative_to(self.root)
        subject = f"specperf: accept {relative.as_posix()} from the run of {first.created[:10]}"
        pushed = self._push(
            lambda: self._files.accept(self.root / relative, first, acceptance),
            lambda: redact_text(f"{subject}\n\n{acceptance}\n"),
            "acceptance",
        )
        if pushed is None:
            return [f"{self.location}: nothing to push (the branch holds the same files)"]
        commit, attempt = pushed
        again = f", after {attempt - 1} push(es) by other jobs came first" if attempt > 1 else ""
        return [f"{self.location}: pushed the acceptance as commit {commit[:7]}{again}"]

    def publish_files(self, write: Callable[[Path], str]) -> list[str]:
        """Commit what `write(root)` puts in the work tree beside the histories (a dashboard made from them;
        it returns the commit's subject) and push it, never forced. When another job pushed first, its
        commit is fetched and `write` runs again on top: what it writes is derived from the histories,
        which that push changed."""
        self.prepare()
        if self._offline:
            raise StoreError(f"{self.location}: the remote cannot be reached; nothing was published")
        subject = ""

        def apply() -> None:
            nonlocal subject
            subject = write(self.work_dir)

        pushed = self._push(apply, lambda: redact_text(subject + "\n"), "files")
        if pushed is None:
            return [f"{self.location}: nothing to publish (the branch holds the same files)"]
        commit, attempt = pushed
        again = f", after {attempt - 1} push(es) by other jobs came first" if attempt > 1 else ""
        return [f"{self.location}: pushed {subject!r} as commit {commit[:7]}{again}"]

    def _push(self, apply: Callable[[], object], message: Callable[[], str], what: str) -> tuple[str, int] | None:
        """Apply, commit and push, up to `PUSH_ATTEMPTS` times: (the pushed commit, the attempt it took),
        or None when the work tree held nothing new. After a push another job's came before, the
        branch is fetched again (`_catch_up` re-appends this session's runs) and `apply` runs again."""
        self._git.ensure_identity()
        for attempt in range(1, PUSH_ATTEMPTS + 1):
            apply()
            commit = self._commit(message())
            if commit is None:
                return None
            ref = f"{commit}:refs/heads/{self.branch}"
            push = self._git(
                "push",
                "--quiet",
                "--porcelain",
                "--no-verify",
                self._remote,
                ref,
                timeout=NETWORK_TIMEOUT_S,
                check=False,
            )
            if push.returncode == 0:
                self._base = commit
                return commit, attempt
            self._catch_up(_push_failure(push))
        self._keep = True
        raise StoreError(
            f"{self.location}: other jobs pushed first {PUSH_ATTEMPTS} times in a row; the {what} are committed "
            f"in {self.work_dir} (HEAD), not pushed"
        )

    def _commit(self, message: str) -> str | None:
        """A commit of the work tree on top of the branch; None when it holds nothing new."""
        self._git("add", "--all")  # the lock and temp files, should the branch's .gitignore not name them:
        self._git("rm", "--cached", "--quiet", "--ignore-unmatch", "--", LOCK_NAME, ":(glob)**/.*.tmp")
        tree = self._git.out("write-tree")
        if self._base is not None and tree == self._git.out("rev-parse", f"{self._base}^{{tree}}"):
            return None
        parents = ["-p", self._base] if self._base is not None else []
        commit = self._git.out("commit-tree", "--no-gpg-sign", *parents, "-m", message, tree)
        self._git("update-ref", "--no-deref", "HEAD", commit)  # the work tree's own detached HEAD
        return commit

    def _catch_up(self, failure: str) -> None:
        """After a failed push: another job's push is merged (its commit, then this session's runs again);
        any other failure is an error, and the work tree with the commit stays."""
        try:
            tip = self._remote_tip(self._git)
        except GitError as exc:
            self._keep = True
            raise StoreError(
                f"{self.location}: could not push ({failure}) nor read the branch again ({exc}); the recorded runs "
                f"are committed in {self.work_dir} (HEAD)"
            ) from None
        if tip is None or tip == self._base:
            self._keep = True
            raise StoreError(
                f"{self.location}: the push was refused ({failure}); check that git's credentials on this machine "
                f"may push to the branch {self.branch}. The recorded runs are committed in {self.work_dir} (HEAD)"
            )
        self._checkout()
        for append in self._appended:
            self._files.append(append.run, new_segment=append.new_segment, history=append.history)

    def _message(self) -> str:
        """'specperf: record 14 runs of perf 2026-12-01, commit abc1234', then which keys and sessions."""
        runs = [a.run for a in self._appended]
        verb = "update" if all(a.new_segment for a in self._appended) else "record"
        suite = self.spec.base.name if self.spec.base is not None and self.spec.base.name else "the suite"
        day = min(r.provenance.created for r in runs)[:10]
        commits = sorted({r.provenance.git_commit for r in runs if r.provenance.git_commit})
        subject = f"specperf: {verb} {len(runs)} run{'s' if len(runs) != 1 else ''} of {suite} {day}"
        if len(commits) == 1:
            subject += f", commit {commits[0][:7]}"
        sessions = sorted({f"session {r.provenance.session or '-'} on {r.provenance.host}" for r in runs})
        body = [*sessions, *(f"  {r.measurement.key.label}" for r in runs)]
        return redact_text(subject + "\n\n" + "\n".join(body) + "\n")

    # ---- the end ----------------------------------------------------------------------------

    def close(self) -> None:
        """Remove the work tree (not a follower's, not one holding runs a push could not deliver)."""
        atexit.unregister(self.close)
        if self._follower or self._keep:
            return
        if self._repository is not None:
            Git(self._repository)("worktree", "remove", "--force", str(self.work_dir), check=False)
            self._repository = None
        if self._owned is not None:
            shutil.rmtree(self._owned, ignore_errors=True)
            self._owned = None
        elif self._prepared and not self._offline:
            shutil.rmtree(self.work_dir, ignore_errors=True)


def _push_failure(push: CompletedProcess[str]) -> str:
    """Why a push failed: the remote's word for the ref (``[rejected] (fetch first)``), else git's error."""
    for line in push.stdout.splitlines():
        if line.startswith("!"):
            return redact_text(line.split("\t")[-1].strip())
    return first_error(push.stderr) or f"git push exited with status {push.returncode}"
