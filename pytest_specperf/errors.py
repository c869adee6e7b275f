"""Errors the plugin raises on purpose, each saying where the problem is and what is allowed."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence


class SpecperfError(Exception):
    """Base class: an error pytest-specperf explains itself (no traceback needed)."""


class ConfigError(SpecperfError):
    """Bad user input found before any server starts: a config file, a marker, an option.

    `where` names the place (file and table/key, or test and marker key), so the message
    alone is enough to fix it.
    """

    def __init__(self, where: str, message: str) -> None:
        self.where = where
        self.message = message
        super().__init__(f"{where}: {message}")


class ConfigErrors(ConfigError):
    """Every problem found in one file (or one command line), so that one run names all of them.

    A user who fixes one mistake a run learns of the next only 20 seconds later; the whole list comes at
    once, each on its own line. `where` and `message` are the first one's.
    """

    def __init__(self, errors: Sequence[ConfigError]) -> None:
        flat: list[ConfigError] = []
        for error in errors:
            flat.extend(error.errors if isinstance(error, ConfigErrors) else (error,))
        self.errors: tuple[ConfigError, ...] = tuple(flat)
        super().__init__(flat[0].where, flat[0].message)

    def __str__(self) -> str:
        return "\n".join(f"{error.where}: {error.message}" for error in self.errors)

    @staticmethod
    def of(errors: Sequence[ConfigError]) -> ConfigError:
        """One error as itself, several as one `ConfigErrors`."""
        return errors[0] if len(errors) == 1 else ConfigErrors(errors)


class ServerError(SpecperfError):
    """A server could not be started, died, or stopped answering (an infrastructure error)."""


class StalledServer(ServerError):
    """The server stopped answering in the middle of a round (no byte of any answer for stall_timeout)."""


class StoreError(SpecperfError):
    """A stored baseline is missing, corrupt or of a newer schema."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """' (did you mean 'rounds'?)' for the closest choice, or '' when nothing is close."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
