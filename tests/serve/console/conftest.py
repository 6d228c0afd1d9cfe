"""The console's browser tests share one headless Chromium per module (tests/support/browser)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.browser import Browser, chromium


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield Browser(driver)
    finally:
        driver.quit()
