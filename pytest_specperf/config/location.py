"""Where the histories live: the `store` setting, parsed once (config, `specperf --store`).

Two forms, chosen by the value (as pytest-benchmark's `--benchmark-storage` picks a backend by
its URI): a path is a directory of JSON files (the file store), ``git:`` is a branch of a git
repository that every machine recording into the history shares (the git store)::

    store = ".specperf"                                            a directory, relative to the config file
    store = "git:specperf-history"                                 a branch of the suite's own repository (origin)
    store = "git:https://github.com/org/perf-history.git#nightly"  a branch of any repository git can reach
    store = "git:/srv/git/perf-history.git#nightly"                a local path (relative: to the config file)

A git URL never carries credentials: they come from git's own configuration (a credential helper,
an SSH key, the CI's token as actions/checkout stores it), so they are never in a committed config,
a message or a report. A URL with a password or token, or an HTTP(S) URL with a user name, is refused.

A third form is a database (store/postgres.py), by its libpq URL::

    store = "postgresql://db.example.com/perf"     host and database; the user and password from libpq's
    store = "postgresql:///perf?service=perf"       environment (PGUSER, PGPASSWORD), ~/.pgpass, a service file

A PostgreSQL URL with a password (in its user part or as ``password=``) is refused, and the refusal
never repeats the password.

`LOCATIONS` is the one table of these forms, by the scheme of the backend that opens each (store/__init__.py
`BACKENDS` has one row per scheme here, and a test keeps the two in step): a new backend is one form here
and one row there. Parsing, and every command that shows a setting, asks the table.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from pytest_specperf.common.redact import redact_url
from pytest_specperf.errors import ConfigError

GIT_PREFIX = "git:"
#: What `git check-ref-format --branch` refuses, as a pattern (checked without running git).
_BAD_BRANCH = re.compile(r"[\x00-\x20~^:?*\[\\\x7f]|\.\.|@\{|//|^[-/.]|[/.]$|\.lock$|/\.|\.lock/|^@$")
_LOCAL_PATH = re.compile(r"^(?:/|\./|\.\./|~)")


@dataclass(frozen=True)
class StoreLocation:
    """A directory (`path`), or a `branch` of the git repository at `url` (None: the suite's own
    repository's `origin`, found from `base`). `offline` is where a git store records when its remote
    cannot be reached; None makes an unreachable remote an error."""

    path: Path | None = None
    branch: str | None = None
    url: str | None = None
    base: Path | None = None
    offline: Path | None = None
    #: a database store's libpq URL (never with a password)
    database: str | None = None

    @property
    def is_git(self) -> bool:
        return self.branch is not None

    @property
    def scheme(self) -> str:
        """Which backend keeps the histories: "file", "git", or a database URL's scheme (``postgresql``)."""
        if self.database is not None:
            return urlsplit(self.database).scheme.lower()
        return "git" if self.branch is not None else "file"

    def shown(self) -> str:
        """As a report header names it: a folder relative to the working directory when below it (as the
        user would type it), a git store as its setting."""
        if self.database is not None:
            return self.database
        if self.branch is None and self.path is not None:
            try:
                return str(self.path.resolve().relative_to(Path.cwd().resolve()))
            except ValueError:
                return str(self.path)
        return str(self)

    def __str__(self) -> str:
        """The setting as written, credentials never shown (they are refused anyway)."""
        if self.database is not None:
            return self.database
        if self.branch is None:
            return str(self.path)
        return f"{GIT_PREFIX}{redact_url(self.url)}#{self.branch}" if self.url else f"{GIT_PREFIX}{self.branch}"

    @classmethod
    def parse(cls, value: str, *, base: Path, where: str) -> StoreLocation:
        """`value` as the config or the command line gives it; relative paths are relative to `base`."""
        return form_of(value).parse(value, base, where)


@dataclass(frozen=True)
class LocationForm:
    """One way to write the `store` setting: the scheme of the backend that opens it, whether a value is
    written this way, and how it is parsed (`where` names the setting in an error)."""

    scheme: str
    matches: Callable[[str], bool]
    parse: Callable[[str, Path, str], StoreLocation]
    #: a form whose value is the user's own words, shown as written (a folder is shown as a path)
    shown_as_written: bool = True
    #: how a command's help writes this form (None: another spelling of a form the help names)
    example: str | None = None


def _database_form(scheme: str) -> LocationForm:
    def matches(value: str) -> bool:
        return "://" in value and urlsplit(value).scheme.lower() == scheme

    example = f"{scheme}://host/db" if scheme == "postgresql" else None
    return LocationForm(scheme, matches, lambda value, base, where: _database(value, base, where), example=example)


def _git(value: str, base: Path, where: str) -> StoreLocation:
    rest = value[len(GIT_PREFIX) :]
    url, _, branch = rest.rpartition("#") if "#" in rest else ("", "", rest)
    if not branch or _BAD_BRANCH.search(branch):
        raise ConfigError(
            where,
            f"{value!r} does not name a valid git branch; write git:<branch> (a branch of the suite's own "
            "repository) or git:<url>#<branch>, e.g. git:specperf-history",
        )
    if "#" in rest and not url:
        raise ConfigError(where, f"{value!r} has an empty URL before '#'; write git:<url>#<branch> or git:<branch>")
    if url and _has_credentials(url):
        raise ConfigError(
            where,
            f"the URL of {redact_url(value)!r} carries credentials; remove them: git's own configuration "
            "supplies them (a credential helper, an SSH key, the CI's token), never the plugin's config",
        )
    if url and _LOCAL_PATH.match(url):
        url = str((base / Path(url).expanduser()).resolve())
    return StoreLocation(branch=branch, url=url or None, base=base)


#: Every form of the `store` setting, by its backend's scheme; the first that matches a value wins,
#: so the folder, which takes any value, comes last.
LOCATIONS: tuple[LocationForm, ...] = (
    _database_form("postgresql"),
    _database_form("postgres"),
    LocationForm("git", lambda value: value.startswith(GIT_PREFIX), _git, example="git:<branch> / git:<url>#<branch>"),
    LocationForm(
        "file",
        lambda value: True,
        lambda value, base, where: StoreLocation(path=base / value),
        shown_as_written=False,
        example="store directory",
    ),
)


def form_of(value: str) -> LocationForm:
    """The form `value` is written in (a folder when no other form claims it)."""
    return next(form for form in LOCATIONS if form.matches(value))


def setting_forms() -> str:
    """The setting's forms as a command's help names them: the folder first."""
    examples = [form.example for form in reversed(LOCATIONS) if form.example is not None]
    return ", or ".join(examples)


def shown_setting(value: str) -> str:
    """A `store` setting as a command names it: a folder as a path, any other form as written (a path
    would fold a URL's `//`)."""
    return value if form_of(value).shown_as_written else str(Path(value))


def _has_credentials(url: str) -> bool:
    """A password or token in the URL, or a user name in an HTTP(S) URL (where it is the token)."""
    parts = urlsplit(url)
    if parts.password or (parts.username and parts.scheme.lower() in ("http", "https")):
        return True
    bare = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])) if parts.netloc else url
    return redact_url(bare) != bare


def _database(value: str, base: Path, where: str) -> StoreLocation:
    """A database URL as given, refused when it carries a password (which the refusal never repeats)."""
    parts = urlsplit(value)
    options = {k.lower() for k, _ in parse_qsl(parts.query, keep_blank_values=True)}
    if parts.password is not None or "password" in options:
        shown = urlunsplit(parts._replace(netloc=parts.hostname or "", query=""))
        raise ConfigError(
            where,
            f"the database URL {shown!r} carries a password; remove it: libpq reads the credentials from its "
            "environment (PGUSER, PGPASSWORD), ~/.pgpass or a service file, never from the plugin's config",
        )
    return StoreLocation(database=value, base=base)
