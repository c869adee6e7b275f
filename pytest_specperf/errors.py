"""Errors the plugin raises on purpose, each saying where the problem is and what is allowed."""

from __future__ import annotations


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


class ServerError(SpecperfError):
    """A server could not be started, died, or stopped answering (an infrastructure error)."""


class StoreError(SpecperfError):
    """A stored baseline is missing, corrupt or of a newer schema."""
