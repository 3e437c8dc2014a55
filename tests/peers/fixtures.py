"""Fixtures for tests that launch from the test LMS; other test folders import them
(`from tests.peers.fixtures import lms, form_browser  # noqa: F401`)."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.peers.form_browser import FormBrowser
from tests.peers.lms import Platform, serve_platform


@pytest.fixture
def lms() -> Iterator[Platform]:
    """A fresh platform, serving on 127.0.0.1, for one test."""
    with serve_platform() as platform:
        yield platform


@pytest.fixture
def form_browser() -> Iterator[FormBrowser]:
    with FormBrowser() as browser:
        yield browser
