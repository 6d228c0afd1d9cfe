"""Fixtures of the agents' tests: the orders API behind a gateway, per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agents_live import Api, orders_behind_gateway


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """The orders API behind `mendpoint serve` (additive mode, the default)."""
    with orders_behind_gateway(tmp_path_factory.mktemp("api")) as running:
        yield running
