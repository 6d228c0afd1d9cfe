"""One request to a path no API has, to see which framework answers (`mendpoint init`).

Frameworks announce themselves in their default 404s and `Server` headers: FastAPI/Starlette
answer `{"detail":"Not Found"}`, Django REST Framework `{"detail":"Not found."}`, Django's
and Werkzeug's HTML pages, Express `Cannot GET /path` with `X-Powered-By: Express`, Spring
Boot `{"timestamp", "status", "error", "path"}`, ASP.NET Core problem details with `traceId`
or `Server: Kestrel`. The guess only picks packs; every pack matches on shapes, so a wrong
guess costs nothing but a line of config.
"""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from email.message import Message
from typing import Any

from gateway.header_names import REQUEST_ID

MAX_BODY = 64 << 10


@dataclass(frozen=True, slots=True)
class Probe:
    path: str
    status: int | None
    stacks: tuple[str, ...] = ()
    evidence: str = ""
    headers: dict[str, str] = field(default_factory=dict)


def probe(upstream: str, timeout_s: float = 5) -> Probe:
    """GET an unknown path on `upstream`; never raises (an unreachable API guesses nothing)."""
    path = f"/mendpoint-init-probe-{secrets.token_hex(4)}"
    request = urllib.request.Request(upstream.rstrip("/") + path, headers={"Accept": "*/*"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            return recognise(path, answer.status, answer.headers, answer.read(MAX_BODY))
    except urllib.error.HTTPError as exc:
        return recognise(path, exc.code, exc.headers, exc.read(MAX_BODY))
    except OSError as exc:
        return Probe(path, None, (), f"no answer: {exc}")


def recognise(path: str, status: int, headers: Message, body: bytes) -> Probe:
    server = headers.get("Server", "")
    powered = headers.get("X-Powered-By", "")
    content_type = headers.get("Content-Type", "")
    text = body.decode("utf-8", "replace")
    data: Any = None
    if "json" in content_type:
        try:
            data = json.loads(text)
        except ValueError:
            data = None
    stacks: list[str] = []
    evidence: list[str] = []

    def found(stack: str, why: str) -> None:
        if stack not in stacks:
            stacks.append(stack)
            evidence.append(why)

    if data == {"detail": "Not Found"}:
        found("fastapi", '{"detail":"Not Found"} (Starlette)')
    if data == {"detail": "Not found."}:
        found("drf", '{"detail":"Not found."} (Django REST Framework)')
    if isinstance(data, dict) and {"timestamp", "status", "error", "path"} <= set(data):
        found("spring", "timestamp/status/error/path (Spring Boot)")
    if "problem+json" in content_type or "kestrel" in server.lower():
        if (isinstance(data, dict) and "traceId" in data) or "kestrel" in server.lower():
            found("aspnet", "problem details with traceId or Server: Kestrel (ASP.NET Core)")
        found("problem-details", "application/problem+json (RFC 9457)")
    if "express" in powered.lower() or (
        text.startswith("<!DOCTYPE html>") and "Cannot GET" in text
    ):
        found("express", "X-Powered-By: Express / Cannot GET (Express)")
    if "werkzeug" in server.lower():
        found("flask", f"Server: {server} (Werkzeug)")
    if "wsgiserver" in server.lower() or ("<title>Not Found</title>" in text and "Django" in text):
        found("django", f"Server: {server} (Django)")
    if "phusion" in server.lower() or (REQUEST_ID.lower() in headers and "x-runtime" in headers):
        found("rails", "X-Runtime / Passenger (Rails)")
    return Probe(path, status, tuple(stacks), "; ".join(evidence), dict(headers.items()))
