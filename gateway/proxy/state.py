"""The immutable per-config state the data path reads once per request.

A reload builds a new `GatewayState` and swaps the app's reference; a request keeps the state
it started with, so it never sees half of one config and half of another.
"""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp
from aiohttp import web

from gateway.classify import Classifier
from gateway.config.loader import LoadedConfig
from gateway.proxy.routes import RouteTable
from gateway.resolve.callers import CallerDirectory
from gateway.resolve.service import RecoveryService


@dataclass(frozen=True, slots=True)
class GatewayState:
    loaded: LoadedConfig
    classifier: Classifier
    routes: RouteTable
    callers: CallerDirectory
    recovery: RecoveryService

    @classmethod
    def build(cls, loaded: LoadedConfig) -> GatewayState:
        return cls(
            loaded,
            Classifier(loaded),
            RouteTable(loaded.config.routes),
            CallerDirectory.build(loaded.callers),
            RecoveryService.build(loaded),
        )


STATE = web.AppKey("mendpoint_state", GatewayState)
SESSION = web.AppKey("mendpoint_session", aiohttp.ClientSession)
