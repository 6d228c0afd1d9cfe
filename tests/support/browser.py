"""A real headless Chromium (Debian's chromium and chromium-driver) driven by Selenium.

The flags keep Chromium from reaching out on its own (updates, sync, QUIC, field trials):
the test machines' closed network refuses those connections, which only slows the browser
down. Each browser gets a fresh profile directory. Selenium is synchronous; `Browser` runs
each step in a thread so the gateway under test, on the test's event loop, keeps answering.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from tests.support.system import system_program
from tests.support.waits import patience

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
)
T = TypeVar("T")


def chromium(profile: Path) -> WebDriver:
    options = webdriver.ChromeOptions()
    options.binary_location = system_program("chromium")
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(system_program("chromedriver")), options=options)


class Browser:
    """One Chromium, its steps awaited (each runs in a thread)."""

    def __init__(self, driver: WebDriver) -> None:
        self.driver = driver

    async def run(self, step: Callable[..., T], *args: Any) -> T:
        return await asyncio.to_thread(step, *args)

    async def open(self, url: str) -> None:
        await self.run(self.driver.get, url)

    async def script(self, source: str, *args: Any) -> Any:
        return await self.run(self.driver.execute_script, source, *args)

    async def text(self, css: str) -> str:
        """The element's textContent: every character, as the DOM holds it."""
        value = await self.script(
            "const e = document.querySelector(arguments[0]); return e && e.textContent;", css
        )
        if value is None:
            raise AssertionError(f"no element {css!r} on {self.driver.current_url}")
        return str(value)

    async def count(self, css: str) -> int:
        return int(await self.script("return document.querySelectorAll(arguments[0]).length;", css))

    async def attrs(self, css: str, name: str) -> list[str]:
        found = await self.script(
            "return [...document.querySelectorAll(arguments[0])]"
            ".map(e => e.getAttribute(arguments[1]));",
            css,
            name,
        )
        return [str(v) for v in found]

    async def fill(self, css: str, value: str) -> None:
        def step() -> None:
            element = self.driver.find_element(By.CSS_SELECTOR, css)
            element.clear()
            element.send_keys(value)

        await self.run(step)

    async def set_value(self, css: str, value: str) -> None:
        """Set a field's value at once (send_keys types a long body key by key)."""
        await self.script("document.querySelector(arguments[0]).value = arguments[1];", css, value)

    async def choose(self, css: str, value: str) -> None:
        def step() -> None:
            Select(self.driver.find_element(By.CSS_SELECTOR, css)).select_by_value(value)

        await self.run(step)

    async def click(self, css: str) -> None:
        await self.run(lambda: self.driver.find_element(By.CSS_SELECTOR, css).click())

    async def wait_for(self, condition: str, *args: Any, timeout_s: float = 20) -> None:
        """Until the JavaScript expression `condition` (a function body's return) is truthy."""
        deadline = time.monotonic() + patience(timeout_s)
        while time.monotonic() < deadline:
            if await self.script(condition, *args):
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"never true on {self.driver.current_url}: {condition}")

    async def screenshot(self, path: Path) -> None:
        await self.run(self.driver.save_screenshot, str(path))


async def shot(browser: Browser, name: str, at: str | None = None) -> None:
    """docs/img/console-NAME.png when MENDPOINT_CONSOLE_SHOTS names a directory (`make
    console-screenshots`), scrolled to `at` if given; nothing otherwise."""
    shots = os.environ.get("MENDPOINT_CONSOLE_SHOTS")
    if not shots:
        return
    if at is not None:
        await browser.script("document.querySelector(arguments[0]).scrollIntoView();", at)
    await browser.screenshot(Path(shots) / f"console-{name}.png")
