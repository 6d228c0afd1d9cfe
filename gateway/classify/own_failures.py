"""The gateway's own failures as rules: no route, a request over a limit, the connection caps.

When the gateway answers a request itself (docs/transparency.md#the-gateways-own-answers)
there is no upstream answer to match, but the failure is one like any other: it goes through
the same enrichment step and comes out in the same shapes, with a code, a category and the
ladder fields. These rules are built in code, not loaded from a pack, because their
`fix_required` names the configured limit the request broke (the number and its config key),
which a pack cannot know. They are matched only by `Observation.refusal` and never by an
upstream status, so no user rule is shadowed by them.
"""

from __future__ import annotations

from gateway.classify.observation import ObservationKind
from gateway.classify.rules import CompiledRule
from gateway.config.models import LimitsSpec
from gateway.config.route_model import RouteSpec
from gateway.config.rule_model import ErrorSpec
from gateway.failure import Category, Refusal

ORIGIN = "built in: the gateway's own answers (docs/transparency.md)"


def refusal_rules(limits: LimitsSpec) -> dict[Refusal, CompiledRule]:
    """One rule per refusal, with the limits of this config written into its fix."""
    return {
        refusal: _rule(refusal, order, spec)
        for order, (refusal, spec) in enumerate(_errors(limits).items())
    }


def route_connection_rules(routes: list[RouteSpec], limits: LimitsSpec) -> dict[str, CompiledRule]:
    """Per route with a `max_connections`, the rule for its share of the upstream pool,
    with its own limit written in."""
    order = list(Refusal).index(Refusal.ROUTE_CONNECTIONS)
    return {
        route.name: _rule(Refusal.ROUTE_CONNECTIONS, order, _route_busy(route.max_connections))
        for route in routes
        if route.max_connections is not None
    }


def _route_busy(limit: int | None) -> ErrorSpec:
    number = "" if limit is None else f" {limit}"
    return _pool_full(
        f"The{number} upstream connections this route may hold (the gateway's "
        "routes[].max_connections) are all in use; nothing was sent"
    )


def _pool_full(message: str) -> ErrorSpec:
    """The gateway's own limit on upstream connections: the upstream was not asked, so the
    request may be sent again whatever its method, once a connection is likely free."""
    return ErrorSpec(
        code="GATEWAY_UPSTREAM_LIMIT",
        category=Category.UNAVAILABLE,
        message=message,
        retryable=True,
        retry_after_ms=1000,
        side_effect_free=True,
    )


def _server_exited(message: str, retryable: bool, fix: str | None) -> ErrorSpec:
    """The request may have run before the server died: a call that is not safe to repeat
    stays not retryable (`render_failure`'s side-effect check)."""
    return ErrorSpec(
        code="MCP_SERVER_EXITED",
        category=Category.UNAVAILABLE,
        message=message,
        retryable=retryable,
        retry_after_ms=0 if retryable else None,
        fix_required=fix,
    )


def _errors(limits: LimitsSpec) -> dict[Refusal, ErrorSpec]:
    """The failure of each refusal; each is in exactly one class (docs/spec.md#classes)."""
    to_correct = {
        refusal: ErrorSpec(code=code, category=category, message=message, fix_required=fix)
        for refusal, (code, category, message, fix) in _to_correct(limits).items()
    }
    return {
        # What is routed is in the operator's config, not in the answer: the failure names
        # no route and no upstream (docs/security.md).
        Refusal.NO_ROUTE: ErrorSpec(
            code="ROUTE_NOT_FOUND",
            category=Category.NOT_FOUND,
            message="No route of this gateway serves this path",
            suggestion="Check the request path against the API's documented base path",
        ),
        **to_correct,
        Refusal.BODY_TOO_LARGE: to_correct[Refusal.BODY_TOO_LARGE].model_copy(
            update={"recovery_intent": "payload_reduction"}
        ),
        # Refused before a byte of the request was read: nothing can have happened.
        Refusal.OVERLOADED: ErrorSpec(
            code="GATEWAY_OVERLOADED",
            category=Category.UNAVAILABLE,
            message="The gateway has reached its limit of client connections",
            retryable=True,
            retry_after_ms=1000,
            side_effect_free=True,
        ),
        # A request the gateway's own upstream limits kept waiting too long: not the upstream.
        Refusal.ROUTE_CONNECTIONS: _route_busy(None),  # each route's: route_connection_rules
        # An MCP server's process exited with requests unanswered (its JSON-RPC error is
        # the gateway's, docs/mcp.md#a-server-that-exits). One code on both transports;
        # retryable only on the bridge, where the client's next session starts a new
        # server: `mendpoint stdio` ends with its server, and only its host can start it.
        Refusal.SERVER_EXITED: _server_exited(
            "The MCP server's process exited before answering; `mendpoint stdio` ended with it",
            retryable=False,
            fix=(
                "Start the MCP server again (the MCP host restarts `mendpoint stdio`); the "
                "server's stderr says why it exited"
            ),
        ),
        Refusal.SESSION_SERVER_EXITED: _server_exited(
            "The MCP server's process exited before answering, and its session ended with "
            "it; the next request gets 404 and the client starts a new session, with a new "
            "server process",
            retryable=True,
            fix=None,
        ),
        Refusal.UPSTREAM_CONNECTIONS: _pool_full(
            f"The gateway's {limits.max_upstream_connections} connections to upstreams "
            "(limits.max_upstream_connections) are all in use; nothing was sent"
        ),
    }


Correction = tuple[str, Category, str, str]
"""A request the client must change before it sends it again: code, category, message and
`fix_required`, which names the configured limit the request broke."""


def _to_correct(limits: LimitsSpec) -> dict[Refusal, Correction]:
    """The refusals a client corrects, one row each; a row's comment says why it is refused."""
    invalid = Category.VALIDATION_ERROR
    return {
        # A path that leaves its route once resolved, or that a server behind the gateway
        # could read as another path (docs/transparency.md#paths). Like NO_ROUTE, it names
        # no route.
        Refusal.UNSAFE_PATH: (
            "UNSAFE_PATH",
            invalid,
            "The request path leaves the route it names once its dot segments are resolved, "
            "or a server that decodes it would read another path",
            "Send the path as a browser would: '.' and '..' segments (also as %2E) resolved, "
            "and no %2F, %5C, backslash or ';' that would make one, then reissue",
        ),
        Refusal.BODY_TOO_LARGE: (
            "PAYLOAD_TOO_LARGE",
            Category.PAYLOAD_TOO_LARGE,
            "The request body is larger than the gateway accepts",
            f"Send a request body of at most {limits.max_request_body_bytes} bytes "
            "(the gateway's limits.max_request_body_bytes), then reissue",
        ),
        Refusal.BODY_TIMEOUT: (
            "REQUEST_TIMEOUT",
            Category.TIMEOUT,
            "The request body was not received in time",
            "Send the request body without pausing: the gateway waits at most "
            f"{limits.request_body_timeout_s:g} s for it (limits.request_body_timeout_s), "
            "then reissue",
        ),
        # Only where the gateway must read a body itself (an MCP route's JSON-RPC messages):
        # an HTTP route forwards the body as sent, in whatever coding.
        Refusal.UNDECODABLE_BODY: (
            "UNSUPPORTED_CONTENT_ENCODING",
            invalid,
            "The request body's Content-Encoding is not one the gateway reads, or the body "
            "is not valid in it",
            "Send the request body uncompressed, or encoded with gzip or deflate (the codings "
            "in the answer's Accept-Encoding), then reissue",
        ),
        Refusal.HEADERS_TOO_LARGE: (
            "REQUEST_HEADERS_TOO_LARGE",
            invalid,
            "The request's header fields are too large or too many",
            f"Send at most {limits.max_headers} header fields of at most "
            f"{limits.max_header_bytes} bytes each (the gateway's limits.max_headers and "
            "limits.max_header_bytes; large cookies and tokens are the usual cause), "
            "then reissue",
        ),
        Refusal.TARGET_TOO_LONG: (
            "URI_TOO_LONG",
            invalid,
            "The request target is too long",
            f"Shorten the request line to at most {limits.max_line_bytes} bytes (the "
            "gateway's limits.max_line_bytes; move data into the body), then reissue",
        ),
        Refusal.MALFORMED: (
            "BAD_REQUEST",
            invalid,
            "The request is not valid HTTP/1.1",
            "Send a well-formed HTTP/1.1 request, then reissue",
        ),
        # A control character decoded from the path (`%0d%0a`, `%00`): the parser refuses
        # it raw, and an upstream that decodes the path would meet it in a header it writes
        # (a Location, a log line) or a C string it ends.
        Refusal.CONTROL_IN_PATH: (
            "INVALID_PATH",
            invalid,
            "The request path holds a percent-encoded control character",
            "Remove the control character (%00-%1F, %7F, or one of U+0080-U+009F) from the "
            "path; send such data in the query or the body, then reissue",
        ),
        # HTTP/2.0 on an HTTP/1 connection, HTTP/0.9 (a request line without a version),
        # HTTP/3.0: the gateway speaks HTTP/1.0 and HTTP/1.1 here (RFC 9110 §15.6.6).
        Refusal.VERSION_NOT_SUPPORTED: (
            "HTTP_VERSION_NOT_SUPPORTED",
            invalid,
            "The request's HTTP version is not one this gateway speaks",
            "Send the request as HTTP/1.1, with a request line METHOD TARGET HTTP/1.1 "
            "(HTTP/1.0 is served too; HTTP/2 needs a connection that negotiated it), "
            "then reissue",
        ),
    }


def _rule(refusal: Refusal, order: int, error: ErrorSpec) -> CompiledRule:
    return CompiledRule(
        id=f"gateway-{refusal.value.replace('_', '-')}",
        order=-1 - order,  # before every loaded rule, though never in the same index
        is_default=False,
        origin=ORIGIN,
        error=error,
        tried_on=frozenset({ObservationKind.REFUSAL}),
        statuses=None,
        transports=None,
        path_segment=None,
    )
