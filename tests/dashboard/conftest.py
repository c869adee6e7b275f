"""A headless Chromium for the dashboard's browser tests, shared by a module's tests (one start)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from browser import Browser
from lanes import chromium


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    executable = chromium()
    if executable is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)")
    started = Browser(executable, tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield started
    finally:
        started.close()
