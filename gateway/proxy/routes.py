"""Choosing the route for a request path (longest prefix) and the delivery mode for a caller."""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass

from yarl import URL

from gateway.config.models import RouteSpec
from gateway.failure import Mode
from gateway.proxy.client import Origin

log = logging.getLogger("mendpoint")

_MODES = {m.value: m for m in Mode}
_RANK = {Mode.ORIGINAL: 0, Mode.HEADERS: 1, Mode.ADDITIVE: 2, Mode.ENVELOPE: 3}


@dataclass(frozen=True, slots=True)
class Route:
    """A configured route with what the hot path needs precomputed."""

    spec: RouteSpec
    origin: Origin
    base_path: str
    upstream_host: str
    idempotent: frozenset[str]
    operations: tuple[tuple[str, re.Pattern[str], str], ...] = ()

    @classmethod
    def build(cls, spec: RouteSpec) -> Route:
        idempotent = frozenset(spec.idempotent_methods)
        operations = tuple(
            (op.method.upper(), compile_template(op.path), op.name) for op in spec.operations
        )
        if spec.upstream is None:  # an MCP bridge route: its upstream is a local command
            return cls(spec, Origin("http", "", 0), "", "", idempotent, operations)
        url = URL(spec.upstream)
        port = url.port or {"http": 80, "https": 443}[url.scheme]
        origin = Origin(url.scheme, url.raw_host or "", port, spec.tls)
        host = f"[{origin.host}]" if ":" in origin.host else origin.host
        if port != {"http": 80, "https": 443}[url.scheme]:
            host = f"{host}:{port}"
        return cls(spec, origin, url.raw_path.rstrip("/"), host, idempotent, operations)

    def operation_for(self, method: str, path: str) -> str:
        """The name `then_retry` uses: a matching `operations` entry, the route's
        `operation`, else `METHOD /path`."""
        for op_method, template, name in self.operations:
            if op_method == method and template.fullmatch(path):
                return name
        return self.spec.operation or f"{method} {path}"

    def upstream_target(self, raw_path: str) -> str:
        """The request target sent upstream, keeping the client's bytes exactly as sent."""
        if raw_path == "*":
            return raw_path  # asterisk form names no resource: no base path, no prefix
        if self.spec.strip_prefix and self.spec.prefix != "/":
            raw_path = raw_path[len(self.spec.prefix.rstrip("/")) :]
            if not raw_path.startswith("/"):
                raw_path = "/" + raw_path
        return self.base_path + raw_path


class RouteTable:
    """Routes by longest prefix, matched on a path-segment boundary (`/api` ≠ `/apix`)."""

    def __init__(self, specs: list[RouteSpec]) -> None:
        routes = [Route.build(s) for s in specs]
        for spec in specs:
            if spec.tls is not None and spec.tls.insecure:
                log.warning(
                    "route %s: TLS certificates of %s are NOT verified (tls.insecure: true); "
                    "anyone on the path can read and change its traffic",
                    spec.name,
                    spec.upstream,
                )
        self._routes = tuple(sorted(routes, key=lambda r: len(r.spec.prefix), reverse=True))

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._routes)

    def find(self, path: str) -> Route | None:
        if path == "*":  # OPTIONS * asks about the server: the route for "/" answers it
            path = "/"
        for route in self._routes:
            prefix = route.spec.prefix
            if path.startswith(prefix) and (
                len(path) == len(prefix) or prefix.endswith("/") or path[len(prefix)] == "/"
            ):
                return route
        return None


def compile_template(template: str) -> re.Pattern[str]:
    """`/orders/{id}` → a pattern where each `{name}` is one non-empty path segment."""
    parts = re.split(r"\{[^/}]+\}", template)
    return re.compile("[^/]+".join(re.escape(part) for part in parts))


def choose_mode(route: Route, requested: str | None, caller: str, request_id: str) -> Mode:
    """The route's mode, overridden by `X-Error-Format` if allowed, capped by the rollout."""
    spec = route.spec
    mode = spec.mode
    if spec.rollout is not None:
        key = caller if spec.rollout.by == "caller" else request_id
        if not in_rollout(spec.name, key, spec.rollout.percent):
            mode = min(mode, Mode.HEADERS, key=_RANK.__getitem__)
    if spec.client_override:
        mode = asked_mode(mode, requested)
    return mode


def asked_mode(mode: Mode, requested: str | None) -> Mode:
    """The mode `X-Error-Format` asks for, when it names one; else `mode`."""
    if requested is None:
        return mode
    return _MODES.get(requested.strip().lower(), mode)


def in_rollout(route_name: str, key: str, percent: float) -> bool:
    """Deterministic share: the same key on the same route lands on the same side everywhere."""
    if percent >= 100:
        return True
    if percent <= 0:
        return False
    digest = hashlib.sha256(f"{route_name}\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 10_000 < percent * 100
