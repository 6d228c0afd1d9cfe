"""Choosing the route for a request path (longest prefix) and the delivery mode for a caller.

A prefix matches on a segment boundary, without regard to ASCII case (unless the route's
`path.case_sensitive` says otherwise) or to a trailing slash: `/mcp` is served for `/MCP`,
`/Mcp/` and `/mcp/x`, as case-insensitive servers (Express, ASP.NET) serve them, so no
spelling of a route's path reaches its upstream through another route
(docs/transparency.md#paths). A path that could mean something else to another server is
read by `request_path` first and must name the same route in every reading.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass

from yarl import URL

from gateway.config.route_model import RouteSpec
from gateway.exchange.request_path import DEFAULT_RULES, PathRules, is_plain, read
from gateway.exchange.upstream.links import Origin
from gateway.failure import Mode

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
    match_prefix: str = "/"
    """The prefix as paths are compared with it: no trailing slash, lower case unless the
    route is case-sensitive."""
    path_rules: PathRules = DEFAULT_RULES
    """How the route reads a path that needs reading (`request_path`)."""
    case_sensitive: bool = False
    """`path.case_sensitive`: compare the path with the prefix as it is, not folded."""

    @classmethod
    def build(cls, spec: RouteSpec) -> Route:
        idempotent = frozenset(spec.idempotent_methods)
        operations = tuple(
            (op.method.upper(), compile_template(op.path), op.name) for op in spec.operations
        )
        paths = spec.path
        match_prefix = match_key(spec.prefix, paths.case_sensitive)
        rules = PathRules(paths.dot_segments, paths.escaped_slashes, paths.merge_slashes)
        if spec.upstream is None:  # an MCP bridge route: its upstream is a local command
            origin, base_path, host = Origin("http", "", 0), "", ""
        else:
            url = URL(spec.upstream)
            port = url.port or {"http": 80, "https": 443}[url.scheme]
            origin = Origin(url.scheme, url.raw_host or "", port, spec.tls)
            host = f"[{origin.host}]" if ":" in origin.host else origin.host
            if port != {"http": 80, "https": 443}[url.scheme]:
                host = f"{host}:{port}"
            base_path = url.raw_path.rstrip("/")
        return cls(
            spec,
            origin,
            base_path,
            host,
            idempotent,
            operations,
            match_prefix,
            rules,
            paths.case_sensitive,
        )

    def operation_for(self, method: str, path: str) -> str:
        """The name `then_retry` uses: a matching `operations` entry, the route's
        `operation`, else `METHOD /path`."""
        for op_method, template, name in self.operations:
            if op_method == method and template.fullmatch(path):
                return name
        return self.spec.operation or f"{method} {path}"

    def upstream_target(self, raw_path: str) -> str:
        """The request target sent upstream: the target `RouteTable.resolve` chose (the
        client's bytes, or its path with dot segments resolved) behind the base path."""
        if raw_path == "*":
            return raw_path  # asterisk form names no resource: no base path, no prefix
        if self.spec.strip_prefix and self.match_prefix != "/":
            raw_path = raw_path[len(self.match_prefix) :]
            if not raw_path.startswith("/"):
                raw_path = "/" + raw_path
        return self.base_path + raw_path


def match_key(prefix: str, case_sensitive: bool) -> str:
    """A prefix as paths are compared with it, and as two routes' prefixes collide."""
    prefix = prefix.rstrip("/") or "/"
    return prefix if case_sensitive else prefix.lower()


Resolved = tuple["Route | None", "str | None"]
"""Where a request target goes: the route its path names (as sent), and the target to
forward to it: as sent, or with its path's dot segments resolved (`request_path`). None for
the target when some reading of the path leaves that route (or names one where there is
none): the gateway refuses the request with 400 `UNSAFE_PATH` and forwards nothing. A plain
tuple: this runs for every request."""


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
        self._routes = tuple(sorted(routes, key=lambda r: len(r.match_prefix), reverse=True))
        for route in self._routes:
            if route.spec.type == "mcp" and route.case_sensitive:
                other = self.find(route.match_prefix.upper())
                if other is not None and other is not route:
                    log.warning(
                        "route %s: path.case_sensitive: true sends %s to route %s, past this "
                        "MCP route's Origin and Host checks; a server that ignores case "
                        "(Express does) serves it as %s",
                        route.spec.name,
                        route.match_prefix.upper(),
                        other.spec.name,
                        route.match_prefix,
                    )

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._routes)

    def resolve(self, target: str) -> Resolved:
        """The route for an origin-form target (or `*`), and what to forward to it."""
        path, mark, query = target.partition("?")
        route = self.find(path)
        if path == "*" or is_plain(path):
            return route, target
        readings = read(path, route.path_rules if route is not None else DEFAULT_RULES)
        if (
            readings is None
            or self.find(readings.forwarded) is not route
            or self.find(readings.decoded) is not route
        ):
            return route, None
        return route, readings.forwarded + mark + query

    def find(self, path: str) -> Route | None:
        """The route whose prefix is the longest that `path` starts with, on a segment
        boundary and as the route compares case."""
        if path == "*":  # OPTIONS * asks about the server: the route for "/" answers it
            path = "/"
        folded = path.lower() if path.isascii() else _ascii_lower(path)
        for route in self._routes:
            prefix = route.match_prefix
            seen = path if route.case_sensitive else folded
            if seen.startswith(prefix) and (
                len(seen) == len(prefix) or prefix == "/" or seen[len(prefix)] == "/"
            ):
                return route
        return None


def _ascii_lower(text: str) -> str:
    """Lower case for ASCII letters only: a length-preserving fold, so the prefix's length
    is where the path continues (a decoded reading may hold any code point)."""
    return "".join(c.lower() if c.isascii() else c for c in text)


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
