"""Choosing the route for a request path (longest prefix) and the delivery mode for a caller."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from yarl import URL

from gateway.config.models import RouteSpec
from gateway.failure import Mode

MODE_HEADER = "X-Error-Format"
_MODES = {m.value: m for m in Mode}
_RANK = {Mode.ORIGINAL: 0, Mode.HEADERS: 1, Mode.ADDITIVE: 2, Mode.ENVELOPE: 3}


@dataclass(frozen=True, slots=True)
class Route:
    """A configured route with what the hot path needs precomputed."""

    spec: RouteSpec
    upstream_base: str
    upstream_host: str
    idempotent: frozenset[str]

    @classmethod
    def build(cls, spec: RouteSpec) -> Route:
        if spec.upstream is None:  # an MCP bridge route: its upstream is a local command
            return cls(spec, "", "", frozenset(spec.idempotent_methods))
        url = URL(spec.upstream)
        default_port = {"http": 80, "https": 443}[url.scheme]
        host = url.raw_host or ""
        if ":" in host:
            host = f"[{host}]"
        if url.port != default_port:
            host = f"{host}:{url.port}"
        return cls(spec, spec.upstream.rstrip("/"), host, frozenset(spec.idempotent_methods))

    def upstream_url(self, raw_path: str) -> URL:
        """The upstream URL for a request target, keeping its bytes exactly as sent."""
        if self.spec.strip_prefix and self.spec.prefix != "/":
            raw_path = raw_path[len(self.spec.prefix.rstrip("/")) :]
            if not raw_path.startswith("/"):
                raw_path = "/" + raw_path
        return URL(self.upstream_base + raw_path, encoded=True)


class RouteTable:
    """Routes by longest prefix, matched on a path-segment boundary (`/api` ≠ `/apix`)."""

    def __init__(self, specs: list[RouteSpec]) -> None:
        routes = [Route.build(s) for s in specs]
        self._routes = tuple(sorted(routes, key=lambda r: len(r.spec.prefix), reverse=True))

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._routes)

    def find(self, path: str) -> Route | None:
        for route in self._routes:
            prefix = route.spec.prefix
            if path.startswith(prefix) and (
                len(path) == len(prefix) or prefix.endswith("/") or path[len(prefix)] == "/"
            ):
                return route
        return None


def choose_mode(route: Route, requested: str | None, caller: str, request_id: str) -> Mode:
    """The route's mode, overridden by `X-Error-Format` if allowed, capped by the rollout."""
    spec = route.spec
    mode = spec.mode
    if spec.rollout is not None:
        key = caller if spec.rollout.by == "caller" else request_id
        if not in_rollout(spec.name, key, spec.rollout.percent):
            mode = min(mode, Mode.HEADERS, key=_RANK.__getitem__)
    if requested is not None and spec.client_override:
        asked = _MODES.get(requested.strip().lower())
        if asked is not None:
            mode = asked
    return mode


def in_rollout(route_name: str, key: str, percent: float) -> bool:
    """Deterministic share: the same key on the same route lands on the same side everywhere."""
    if percent >= 100:
        return True
    if percent <= 0:
        return False
    digest = hashlib.sha256(f"{route_name}\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 10_000 < percent * 100
