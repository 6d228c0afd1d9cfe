"""Which `Accept` values prefer JSON over HTML (gateway/text/accept.py): the headers real clients
send, q-values, wildcards and malformed input."""

from __future__ import annotations

import pytest

from gateway.text.accept import parse, prefers_json

FIREFOX = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
CHROME = (
    "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,"
    "image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7"
)
AXIOS = "application/json, text/plain, */*"

CASES = {
    # Clients as they come.
    "firefox": (FIREFOX, False),
    "chrome": (CHROME, False),
    "curl and python-requests": ("*/*", False),
    "no header": ("", False),
    "axios": (AXIOS, True),
    "an SDK": ("application/json", True),
    "problem details": ("application/problem+json", True),
    "a vendor type": ("application/vnd.github+json", True),
    "json suffix with params": ("application/vnd.api+json; charset=utf-8", True),
    # q-values decide.
    "json above html": ("text/html;q=0.9, application/json", True),
    "html above json": ("application/json;q=0.9, text/html", False),
    "json above a wildcard's html": ("application/json;q=0.5, */*;q=0.1", True),
    "a wildcard above json": ("application/json;q=0.5, */*", False),
    "text/* above json": ("application/json;q=0.5, text/*", False),
    "json refused": ("application/json;q=0, */*", False),
    "html refused, json named": ("application/json;q=0.1, text/html;q=0", True),
    "html refused, xhtml by wildcard": ("application/json;q=0.5, text/html;q=0, */*", False),
    # Ties: the wildcard loses to a named JSON type, a named HTML type does not.
    "json ties a wildcard": ("application/json, */*", True),
    "json ties html": ("application/json, text/html", False),
    "html ties json, html first": ("text/html, application/json", False),
    "xhtml ties json": ("application/xhtml+xml, application/json", False),
    # Only a named JSON type is a preference.
    "application/*": ("application/*", False),
    "text/* only": ("text/*;q=0.5", False),
    # Malformed input counts as absent, never as a preference.
    "q above 1": ("application/json;q=2, text/html;q=0.5", False),
    "q not a number": ("application/json;q=high", False),
    "q with four decimals": ("application/json;q=0.1234", False),
    "q nan": ("application/json;q=nan", False),
    "no subtype": ("application, text/html", False),
    "half a wildcard": ("*/json", False),
    "case and spaces": ("  Application/JSON ; Q=0.8 ,TEXT/HTML;q=0.5", True),
}


@pytest.mark.parametrize(("accept", "expected"), CASES.values(), ids=CASES.keys())
def test_prefers_json(accept: str, expected: bool) -> None:
    assert prefers_json(accept) is expected


def test_a_range_past_the_limit_is_not_read() -> None:
    padding = ",".join(f"image/x-{i}" for i in range(100))
    assert prefers_json("application/json, " + padding)
    assert not prefers_json(padding + ", application/json")


def test_parse_keeps_q_and_drops_the_malformed() -> None:
    ranges = parse("text/html;level=1;q=0.7, bad, application/json")
    assert [(r.type, r.subtype, r.q) for r in ranges] == [
        ("text", "html", 0.7),
        ("application", "json", 1.0),
    ]
