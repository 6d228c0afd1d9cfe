"""What redaction masks and what it keeps (docs/security.md#redaction).

Every case that got through before (a Stripe key after "API key provided:", an npm token, a
password in a database URL, a JSON object inside a string, a multi-word value, a list value, a
YAML value on the next line), then a generated corpus: credentials of every shipped format,
URL passwords and secret-named pairs, each put into realistic error text, JSON (as a value of
any type, in a nested object, inside a string that is itself JSON), YAML-ish text and URLs.
For each, no part of the secret survives in any output (`Redactor.text`, `Redactor.body`, the
failure's message and fields, the whole envelope) and the text around it does.
"""

from __future__ import annotations

import json
import string
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.classify.redact import BUILTIN, MASK, Redactor
from gateway.config.models import RedactionSpec
from gateway.enrich.envelope import FailureFacts
from gateway.exchange.answer import render
from gateway.failure import NO_RECOVERY, Category, Failure, FieldError, Mode
from gateway.text.json_text import Raw

REDACTOR = Redactor.build(RedactionSpec())
STRIPE = "sk_live_51H8xyzABCdefGHIjklMNOpq1234"
NPM = "npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


def copied(body: str) -> str:
    """What `meta.original` would carry of `body`, as text."""
    result = REDACTOR.body(body)
    return result.text if isinstance(result, Raw) else result


# (the input, the secret that must go, text around it that must stay)
ISSUE_CASES = {
    "stripe key after a phrase": (
        f"Invalid API key provided: {STRIPE}",
        STRIPE,
        "Invalid API key provided:",
    ),
    "npm token": (
        f"npm ERR! code E401\nnpm ERR! This token seems to be invalid: {NPM}",
        NPM[4:],
        "seems to be invalid",
    ),
    "database url": (
        "could not connect to mysql://admin:DbPa55word@db.internal:3306/shop",
        "DbPa55word",
        "@db.internal:3306/shop",
    ),
    "json object in a string": (
        json.dumps({"detail": json.dumps({"password": "hunter2pass", "user": "ann"})}),
        "hunter2pass",
        "ann",
    ),
    "escaped json in text": (
        'upstream said "{\\"password\\": \\"hunter2pass\\", \\"user\\": \\"ann\\"}"',
        "hunter2pass",
        "ann",
    ),
    "multi-word value": (
        '{"password":"correct horse battery staple","user":"ann"}',
        "horse battery staple",
        "ann",
    ),
    "list value": (
        json.dumps({"x-api-key": [STRIPE, "second-key-value"], "user": "ann"}),
        "second-key-value",
        "ann",
    ),
    "yaml next line": (
        "database:\n  user: ann\n  password:\n    hunter2pass\n  host: db\n",
        "hunter2pass",
        "host: db",
    ),
    "yaml block scalar": (
        "database:\n  password: |\n    hunter2pass\n    more-of-it\nhost: db\n",
        "more-of-it",
        "host: db",
    ),
    "yaml list": ("password:\n  - hunter2pass\n  - other-one\nhost: db\n", "other-one", "host"),
    "yaml multi-word": ("user: ann\npassword: correct horse battery\nhost: db", "horse", "db"),
    "after a tool's name": (
        "Error executing tool login: password: hunter2pass was refused",
        "hunter2pass",
        "was refused",
    ),
    "a tool's argument": (
        "Error calling tool 'connect': api_token: tok-12345678 rejected",
        "tok-12345678",
        "rejected",
    ),
}


@pytest.mark.parametrize(("text", "secret", "kept"), ISSUE_CASES.values(), ids=ISSUE_CASES)
def test_the_cases_that_got_through(text: str, secret: str, kept: str) -> None:
    for output in (REDACTOR.text(text), copied(text)):
        assert secret not in output, output
        assert kept in output, output
        assert MASK in output


def test_a_secret_named_members_value_is_masked_whatever_its_type() -> None:
    body = {
        "password": 12345678,
        "api_key": ["a-key-value", "b-key-value"],
        "credentials": {"user": "ann", "pass": "p-value"},
        "token": True,
        "secret": None,
        "session_id": "",
        "note": "kept as it is",
    }
    clean = json.loads(copied(json.dumps(body)))
    assert clean == {
        "password": MASK,
        "api_key": MASK,
        "credentials": MASK,
        "token": MASK,
        "secret": None,  # nothing to hide
        "session_id": "",
        "note": "kept as it is",
    }


def test_a_clean_json_body_is_copied_as_its_own_text() -> None:
    text = '{ "n": 1.10, "big": 12345678901234567890.5, "huge": 1e400, "a": [1, 2] }\n'
    assert REDACTOR.body(text) == Raw(text.strip())


def test_numbers_survive_a_masked_body_exactly() -> None:
    text = '{"password": "x y", "n": 1.10, "huge": 1e400, "big": ' + "9" * 5000 + "}"
    clean = copied(text)
    assert clean == '{"password":"[REDACTED]","n":1.10,"huge":1e400,"big":' + "9" * 5000 + "}"


def test_not_json_is_redacted_as_text() -> None:
    for text in ('{"password": "hunter2pass", "n": NaN}', "password=hunter2pass; next"):
        result = REDACTOR.body(text)
        assert isinstance(result, str) and "hunter2pass" not in result


KEPT = [
    "CSRF Failed: CSRF token missing.",
    "The security token included in the request is expired",
    "Basic authentication required",
    "Send a Bearer token in the Authorization header",
    "Order 42 was not found",
    "Rate limit exceeded: 120 requests per minute; retry after 30 seconds",
    "Your task has been queued in Asia/Tokyo; see https://status.example.com/incidents/42",
    "ssh://git@github.com/org/repo.git is not reachable",
    "Field 'email' must be a valid address (got bob@example.com)",
    # A tool named in an SDK's wrapping, then the tool's own message (the TypeScript SDK's
    # validation error, the Python SDK's and FastMCP's wrappers).
    "Input validation error: Invalid arguments for tool get_tokens: Invalid option: expected "
    'one of "colors"',
    "Error executing tool rotate_secret: Invalid rotation period",
    "Error calling tool 'get_token': Missing scope",
]


@pytest.mark.parametrize("text", KEPT)
def test_ordinary_messages_are_kept_whole(text: str) -> None:
    assert REDACTOR.text(text) == text
    assert copied(json.dumps({"message": text})) == json.dumps({"message": text})


# --- the generated corpus -----------------------------------------------------------------

ALNUM = string.ascii_letters + string.digits
LOWER_HEX = "0123456789abcdef"


def body(alphabet: str, size: int, at_least: int | None = None) -> st.SearchStrategy[str]:
    return st.text(alphabet, min_size=size, max_size=at_least or size)


def secret_of(prefix: str, alphabet: str, size: int, most: int | None = None) -> Any:
    return body(alphabet, size, most).map(lambda rest: prefix + rest)


# One strategy per shipped format: what a real credential of it looks like.
FORMATS: dict[str, st.SearchStrategy[str]] = {
    "github": st.sampled_from(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]).flatmap(
        lambda p: secret_of(p, ALNUM, 36)
    ),
    "github fine-grained": secret_of("github_pat_", ALNUM + "_", 82),
    "gitlab": st.sampled_from(["glpat-", "glptt-", "gldt-", "glrt-", "gloas-"]).flatmap(
        lambda p: secret_of(p, ALNUM + "_-", 20, 40)
    ),
    "slack": st.sampled_from(["xoxb-", "xoxp-", "xoxa-", "xoxe-"]).flatmap(
        lambda p: secret_of(p, string.digits + "-" + string.ascii_letters, 24, 60)
    ),
    "stripe": st.sampled_from(["sk_live_", "sk_test_", "rk_live_", "rk_test_"]).flatmap(
        lambda p: secret_of(p, ALNUM, 24, 99)
    ),
    "aws access key": st.sampled_from(["AKIA", "ASIA", "ABIA", "ACCA"]).flatmap(
        lambda p: secret_of(p, string.ascii_uppercase + "234567", 16)
    ),
    "google api key": secret_of("AIza", ALNUM + "_-", 35),
    "npm": secret_of("npm_", ALNUM, 36),
    "pypi": secret_of("pypi-AgEIcHlwaS5vcmc", ALNUM + "_-", 50, 120),
    "openai": st.sampled_from(["sk-", "sk-proj-", "sk-svcacct-"]).flatmap(
        lambda p: secret_of(p, ALNUM, 20, 80).filter(lambda s: any(c.isdigit() for c in s))
    ),
    "anthropic": secret_of("sk-ant-api03-", ALNUM + "_-", 93).map(lambda s: s + "AA"),
    "sendgrid": st.tuples(body(ALNUM, 22), body(ALNUM, 43)).map(lambda p: f"SG.{p[0]}.{p[1]}"),
    "shopify": secret_of("shpat_", LOWER_HEX, 32),
    "digitalocean": secret_of("dop_v1_", LOWER_HEX, 64),
    "hugging face": secret_of("hf_", string.ascii_letters, 34),
    "databricks": secret_of("dapi", LOWER_HEX, 32),
    "vault": secret_of("hvs.", ALNUM + "_-", 24, 90),
    "jwt": st.tuples(
        body(ALNUM + "_-", 10, 40), body(ALNUM + "_-", 10, 80), body(ALNUM, 0, 43)
    ).map(lambda p: f"eyJ{p[0]}.eyJ{p[1]}.{p[2]}"),
}
PEM_BODY = body(ALNUM + "+/", 64, 200)
# A word a password might be: letters and digits, with a digit or a capital so it is not a word.
PASSWORD = body(ALNUM + "!#$%*+-_.", 10, 24).filter(
    lambda p: any(c.isdigit() for c in p) and not p.isdigit()
)
PASSPHRASE = st.lists(body(string.ascii_lowercase, 4, 9), min_size=3, max_size=5).map(" ".join)
NAMES = st.sampled_from(
    ["password", "db_password", "passwd", "secret", "client_secret", "api_key", "apiKey",
     "x-api-key", "access_token", "refresh_token", "auth_token", "private_key", "credentials",
     "session_id", "Authorization", "aws_secret_access_key", "signature"]
)  # fmt: skip
# Text around the secret that must come through: words an agent needs to act on.
KEEP = "ORDER_SERVICE_UNAVAILABLE"
ERROR_TEXTS = [
    "Invalid API key provided: {s}. " + KEEP,
    "{s} is not a valid credential for " + KEEP,
    "upstream rejected the request ({s}); " + KEEP,
    "Authorization: Bearer {s}\n" + KEEP,
    "token={s}&service=" + KEEP,
    KEEP + " failed: could not authenticate with {s}",
]


@st.composite
def leaks(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A body holding secrets, and the parts of them that must not survive."""
    kind = draw(st.sampled_from(["text", "json", "json in string", "yaml", "url", "pem"]))
    fmt = draw(st.sampled_from(sorted(FORMATS)))
    token = draw(FORMATS[fmt])
    name = draw(NAMES)
    password = draw(st.one_of(PASSWORD, PASSPHRASE))
    if kind == "text":
        return draw(st.sampled_from(ERROR_TEXTS)).format(s=token), [token]
    if kind == "json":
        value: Any = draw(
            st.sampled_from([password, [password, token], {"value": password}, 73510924, token])
        )
        message = draw(st.sampled_from(ERROR_TEXTS)).format(s=token)
        document = {"error": {"message": message, "service": KEEP, "debug": {name: value}}}
        secrets = [token] + ([password] if json.dumps(password) in json.dumps(value) else [])
        if value == 73510924:
            secrets.append("73510924")
        return json.dumps(document, indent=draw(st.sampled_from([None, 2]))), secrets
    if kind == "json in string":
        inner = json.dumps({name: password, "service": KEEP, "key": token})
        return json.dumps({"detail": inner, "status": 500}), [password, token]
    if kind == "yaml":
        layout = draw(
            st.sampled_from(
                ["{n}: {p}\n", "{n}:\n  {p}\n", "{n}: |\n  {p}\n", "{n}:\n  - {p}\n",
                 '{n}: "{p}"\n', "export {N}={p}\n"]
            )
        )  # fmt: skip
        line = layout.format(n=name, N=name.upper().replace("-", "_"), p=password)
        return f"service: {KEEP}\n{line}token_value: {token}\nretry: false\n", [password, token]
    if kind == "url":
        scheme = draw(st.sampled_from(["mysql", "postgres", "redis", "https", "amqp", "mongodb"]))
        url_password = draw(PASSWORD.filter(lambda p: not set(p) & set("/?#@")))
        url = f"{scheme}://svc_user:{url_password}@db.internal:5432/{KEEP}"
        return f"connection to {url} refused", [url_password]
    lines = draw(PEM_BODY)
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{lines}\n-----END RSA PRIVATE KEY-----"
    return json.dumps({"service": KEEP, "debug": f"loaded key\n{pem}\n"}), [lines]


def outputs(text: str) -> list[str]:
    """Everything the gateway writes of `text`: as a message, a field, `meta.original`."""
    failure = Failure(
        code="UPSTREAM_ERROR",
        category=Category.UPSTREAM_ERROR,
        message=text,
        retryable=False,
        retry_after_ms=None,
        fix_required=None,
        fix_command=None,
        suggestion=None,
        recovery_intent=None,
        rule_id="r",
        from_default_rule=True,
        fields=(FieldError("body.password", text),),
    )
    clean = REDACTOR.failure(failure)
    facts = FailureFacts("req", 1, 500, "application/json", text.encode())
    rendering = render(Mode.ENVELOPE, clean, NO_RECOVERY, facts, "X-Error-", REDACTOR)
    assert rendering.body is not None
    envelope = rendering.body.decode()
    json.loads(envelope)  # always a JSON document
    return [REDACTOR.text(text), copied(text), clean.message, clean.fields[0].message, envelope]


def fragments(secret: str) -> list[str]:
    """The secret and every run of 8 of its characters: no part long enough to use."""
    core = secret.strip()
    return [core[i : i + 8] for i in range(0, max(1, len(core) - 7))]


# The words every output has anyway (the envelope's own names, the templates): a secret drawn
# as "…available…" is not found in "recovery_available".
VOCABULARY = " ".join([*outputs("x"), *ERROR_TEXTS, "service retry token_value false status"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(leaks())
def test_no_part_of_a_generated_secret_survives(leak: tuple[str, list[str]]) -> None:
    text, secrets = leak
    for output in outputs(text):
        for secret in secrets:
            for part in fragments(secret):
                assert part not in output or part in VOCABULARY, (part, output)
        assert KEEP in output, output


N = 20_000
HOSTILE = {
    "names without a separator": "password " * (N // 9),
    "separators without a value": "password=" * (N // 9),
    "spaces below a name": "password:\n" + " " * N,
    "an unterminated quote": '"password": "' + "x" * N,
    "escaped quotes": 'password: \\"' + '\\"' * (N // 2),
    "brackets": "token: [" + "[" * N,
    "dashes": "a-" * (N // 2),
    "a long word after a name": "apikey" + "a" * N,
    "a YAML block": "password: |\n" + "  x\n" * (N // 4),
    "a URL without an end": "https://" + "a" * N + "@",
    "colons after a scheme": "mysql://" + ":" * N,
    "a scheme and a word": "Bearer " + "a" * N,
    "sk- without a digit": "sk-" + "a" * N,
    "a JWT prefix": "eyJ" + "a" * N + ".",
    "names on every line": "password\n" * (N // 9),
    "many secret names": '{"token_count": 1, ' * (N // 20),
}


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE)
def test_hostile_text_is_redacted_within_the_time_limit(text: str) -> None:
    """A pattern that backtracked would run past its time limit on 20 KB and mask the whole
    text; each of these is read in time linear in its length."""
    assert REDACTOR.text(text) != MASK
    assert copied(text) != MASK


def test_every_shipped_pattern_compiles_and_once() -> None:
    """Each is compiled when a text first needs it (`redact.Rule.pattern`), not at import:
    every one must compile, and every use gets the same compiled pattern."""
    assert len(BUILTIN.rules) > 40
    for rule in BUILTIN.rules:
        assert rule.pattern.pattern == rule.source
        assert rule.pattern is rule.pattern
