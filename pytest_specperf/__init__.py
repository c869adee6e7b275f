"""pytest-specperf: speculative-decoding performance of LLM servers as pytest tests."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pytest-specperf")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
