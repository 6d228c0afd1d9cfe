"""Redaction: secrets cut out of text the gateway copies somewhere new (docs/security.md#redaction).

A debug page or an echoing API can put a token, a `password=` pair, a database URL with its
password or a private key into an error body. Whatever the gateway copies out of a body passes
`Redactor` first, so a secret travels no further than it already had: captured exchanges for
`mendpoint suggest`, a failure's `message` and `fields` (`Redactor.failure`, in the one
enrichment step, so every shape, MCP's included, gets them clean) and an envelope's
`meta.original` (`Redactor.body`). The upstream's own bytes and members are never touched.

Text (`Redactor.text`) is searched for the credential formats secret scanners know (GitHub,
GitLab, Slack, Stripe, AWS, Google, npm, PyPI, OpenAI and Anthropic keys, JWTs, private key
blocks, …; gitleaks' rule list is the reference), the password in a URL's userinfo, a
credential after an authorization scheme, and `name=value`, `name: value`, `"name": "value"`
pairs whose name says secret, the value masked whole: a quoted value to its closing quote
(escaped quotes too, for JSON inside a string), a list or object to its bracket, a YAML
block or list on the lines below. A JSON body is redacted as JSON (`Redactor.body`): the
value of a member whose name says secret is masked whatever its type, every string is
redacted as text, and a string that is itself a JSON document is redacted as one.

Every pattern runs under the `regex` module's timeout; one that runs past it masks the whole
text. Names, gaps and brackets are bounded and a repetition that could backtrack is
possessive, so the time is linear in the text; and each pattern is skipped, for a substring
test, on a text without the lower-case hint it needs (`Rule`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import regex

from gateway.config.models import RedactionSpec
from gateway.failure import Failure, FieldError
from gateway.text.json_text import JSON_SPACE, Members, Number, Raw, read, write

MASK = "[REDACTED]"
TIMEOUT_S = 0.05

# Names that say their value is secret, each with the lower-case text it cannot do without
# (the hint that lets a text without it skip the name's patterns).
NAME_GROUPS = (
    ("passw", r"passw(?:or)?d"),
    ("passphrase", r"passphrase"),
    ("pwd", r"pwd"),
    ("secret", r"secret"),
    ("token", r"token"),
    ("key", r"(?:api|access|account|private|signing|encryption|master)[ _\-]?key"),
    ("credential", r"credential"),
    ("authori", r"authori[sz]ation"),
    ("cookie", r"cookie"),
    ("session", r"session[_\-]?id"),
    ("signature", r"signature"),
)
SECRET_NAMES = "|".join(name for _, name in NAME_GROUPS)
_MASKED = regex.escape(MASK)
_SEPARATOR = r"""(?:\\?["'])?[ \t]*(?::=|=>|[:=])[ \t]*"""
# What a secret pair's value is, in the order tried; the group `secret` is what is masked.
_VALUE = (
    r'"(?P<secret>(?:[^"\\\n]|\\.)+)"'  # "quoted", escapes and all
    r'|\\"(?P<secret>(?:[^"\\\n]|\\[^"\n])+)\\"'  # \"quoted\": JSON inside a string
    r"|'(?P<secret>[^'\n]+)'"
    # A list or an object, whole (one already holding a mask included).
    rf"|(?P<secret>\[(?:[^\[\]]|{_MASKED}){{0,4096}}\]|\{{(?:[^{{}}]|{_MASKED}){{0,4096}}\}})"
    # A YAML block scalar, a YAML list, or a plain value on the lines below the name.
    r"|[|>][+\-]?[1-9]?[ \t]*\r?\n[ \t]+(?P<secret>[^\n]*+(?:\n[ \t]+[^\n]*+)*+)"
    r"|\r?\n[ \t]*-[ \t]+(?P<secret>[^\n]*+(?:\n[ \t]*-[ \t]+[^\n]*+)*+)"
    r"|\r?\n[ \t]+(?P<secret>\S[^\r\n]*)"
    r"""|(?P<secret>[^\s"'&,;<>\\\[{][^\s"'&,;<>\\]*)"""  # a bare word: to a space or delimiter
)
_SCHEMES = r"bearer|basic|token|apikey|digest"
_NOT_A_TOOL_NAME = r"""(?<!\btool[ \t]{1,4}["']?[\w\-.]{0,40})"""
"""Not inside a tool's name that follows the word "tool" (an SDK's wrapping names it)."""

# The credential formats of gitleaks' rule list (config/gitleaks.toml), each with the
# lower-case prefixes that name its issuer: the prefix, and a body long enough not to be a
# word. Each is at least LONG_WORD characters without a space.
TOKEN_FORMATS = (
    (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), r"(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}"),
    (("github_pat_",), r"github_pat_[A-Za-z0-9_]{30,}"),  # GitHub, fine-grained
    (
        ("glpat-", "glptt-", "gldt-", "glrt-", "glcbt-", "glft-", "glimt-", "glagent-",
         "gloas-", "glsoat-"),
        r"gl(?:pat|ptt|dt|rt|cbt|ft|imt|agent|oas|soat)-[\w\-]{20,}",
    ),  # GitLab
    (("gr1348941",), r"GR1348941[\w\-]{20,}"),  # GitLab runner registration
    (("xox",), r"xox[abposre]-[A-Za-z0-9\-]{15,}"),  # Slack
    (("xapp-",), r"xapp-\d-[A-Za-z0-9\-]{13,}"),  # Slack app-level
    (("sk_", "rk_"), r"(?:sk|rk)_(?:live|test|prod)_[A-Za-z0-9]{12,}"),  # Stripe
    (("whsec_",), r"whsec_[A-Za-z0-9]{20,}"),  # Stripe webhook secret
    (
        ("a3t", "akia", "asia", "abia", "acca", "agpa", "aida", "aroa", "aipa", "anpa",
         "anva", "apka"),
        r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[A-Z0-9]{16}",
    ),  # AWS access key ids
    (("aiza",), r"AIza[\w\-]{35}"),  # Google API key
    (("gocspx-",), r"GOCSPX-[\w\-]{20,}"),  # Google OAuth client secret
    (("ya29.",), r"ya29\.[\w\-]{20,}"),  # Google OAuth access token
    (("npm_",), r"npm_[A-Za-z0-9]{30,}"),  # npm
    (("pypi-",), r"pypi-AgE[\w\-]{30,}"),  # PyPI
    (("sk-",), r"sk-(?=[\w\-]{0,200}\d)[\w\-]{20,}"),  # OpenAI, Anthropic (sk-ant-…), kin
    (("sg.",), r"SG\.[\w\-]{16,}\.[\w\-]{16,}"),  # SendGrid
    (("shp",), r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"),  # Shopify
    (("_v1_",), r"do[opr]_v1_[a-f0-9]{64}"),  # DigitalOcean
    (("hf_",), r"hf_[A-Za-z0-9]{30,}"),  # Hugging Face
    (("hrku-",), r"HRKU-[\w\-]{20,}"),  # Heroku
    (("dapi",), r"dapi[a-f0-9]{32}"),  # Databricks
    (("lin_api_",), r"lin_api_[A-Za-z0-9]{30,}"),  # Linear
    (("pmak-",), r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}"),  # Postman
    (("dp.pt.",), r"dp\.pt\.[A-Za-z0-9]{40,}"),  # Doppler
    (("eaaa", "sq0"), r"(?:EAAA|sq0atp-|sq0csp-)[\w\-]{22,}"),  # Square
    (("key-",), r"key-[a-f0-9]{32}"),  # Mailgun
    (("age-secret-key-",), r"AGE-SECRET-KEY-1[0-9A-Z]{58}"),  # age
    (("hvs.", "hvb.", "hvr."), r"hv[sbr]\.[\w\-]{20,}"),  # HashiCorp Vault
    (("atlasv1",), r"[a-z0-9]{14}\.atlasv1\.[\w\-=]{60,}"),  # Terraform Cloud
    (("glsa_",), r"glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}"),  # Grafana service account
    (("dckr_pat_",), r"dckr_pat_[\w\-]{20,}"),  # Docker Hub
    (("akcp",), r"AKCp[A-Za-z0-9]{60,}"),  # Artifactory
    (("eyj",), r"eyJ[\w\-]{8,}\.[\w\-]{8,}\.[\w\-]*"),  # JSON Web Token (alg none: no signature)
)  # fmt: skip


LONG_WORD = 20


@dataclass(frozen=True, slots=True)
class Rule:
    """A shipped pattern and the lower-case texts one of which it needs to match at all: a
    text holding none of them skips it for a substring test (a regex scan costs 10-100 times
    more), which keeps the step cheap on the many messages with no secret.

    The pattern is compiled the first time a text holding one of its hints needs it, once per
    process: compiling all of them cost every gateway process ~35 ms of CPU at import (the
    `regex` module parses in Python), and most processes never see most hints.
    """

    source: str
    hints: tuple[str, ...]
    lines: bool = False
    """Only for a text of several lines."""
    long_word: bool = False
    """Only for a text with a word of LONG_WORD characters or more: an issued credential is
    one, and most messages have none, so their format hints are not even looked for."""
    requires: str = ""
    """Lower-case text it needs as well as a hint (a URL's userinfo needs `://` and `@`)."""

    @property
    def pattern(self) -> regex.Pattern[str]:
        """The compiled pattern (`_compiled`: the same object for every use)."""
        return _compiled(self.source)

    def holds(self, value: str, lowered: str) -> bool:
        """Whether this rule can match in `value` (`lowered` is its lower-cased form)."""
        return (
            (not self.lines or "\n" in value)
            and any(map(lowered.__contains__, self.hints))
            and self.requires in lowered
        )


@functools.cache
def _compiled(source: str) -> regex.Pattern[str]:
    compiled: regex.Pattern[str] = regex.compile(source)
    return compiled


def _rules() -> tuple[Rule, ...]:
    """Every shipped pattern, in the order run; a match's `secret` group is masked, or all of
    it when the pattern has none."""
    rules = [
        # PEM private key blocks, whole (to the end of the text when the END line is missing).
        Rule(
            (
                r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
                r"(?:-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----|$)"
            ),
            ("private key",),
        ),
        # Webhook URLs whose path is the credential.
        Rule(
            (
                r"(?:hooks\.slack\.com/(?:services|workflows|triggers)|"
                r"discord(?:app)?\.com/api/webhooks)/(?P<secret>[\w\-+/]{20,})"
            ),
            ("hooks.slack.com", "/api/webhooks/"),
        ),
        # A URL's userinfo: the password of user:password@, or a long token standing alone.
        Rule(
            (
                r"(?i)(?<=\b[a-z][a-z0-9+.\-]{1,20})://(?:[^\s/?#@:\"'<>]{0,256}:"
                r"(?P<secret>[^\s/?#\"'<>]{1,256})|(?P<secret>[\w\-.~%]{20,256}))@"
            ),
            ("://",),
            requires="@",
        ),
        # An authorization scheme and its credential. A credential has a digit or a change of
        # case inside it; an English word after "token" ("CSRF token missing.", "the security
        # token included in …") has neither, and the messages that say so must stay whole.
        Rule(
            (
                rf"(?i)\b(?:{_SCHEMES})\s+(?P<secret>(?-i:(?=[A-Za-z0-9._~+/=\-]{{0,200}}"
                r"(?:[0-9]|[a-z][A-Z]))[A-Za-z0-9._~+/=\-]{8,}))"
            ),
            ("bearer", "basic", "token", "apikey", "digest"),
        ),
    ]
    # Issued credential formats, wherever they stand.
    rules.extend(
        Rule(rf"(?a)(?<![\w\-]){body}(?![\w\-])", hints, long_word=True)
        for hints, body in TOKEN_FORMATS
    )
    for hint, name in NAME_GROUPS:
        # The name at the start of a line of a text of several lines (YAML, .env, INI, a
        # header dump): its unquoted value is the rest of the line, spaces and all. (A
        # one-line text is a message, where the words after "password:" may be prose.)
        line_start = (
            r"(?im)(?<=(?:^|\n)[ \t]*(?:-[ \t]+|export[ \t]+)?[\"']?[\w\-.]{0,40})"
            rf"(?:{name})[\w\-.]{{0,40}}+{_SEPARATOR}(?P<secret>[^\s\"'\[{{|>\\][^\r\n]*)"
        )
        rules.append(Rule(line_start, (hint,), lines=True))
        # Anywhere: the name, up to two words ("API key provided"), a separator, an
        # authorization scheme if there is one, and the value. Not inside the name of a tool
        # that an SDK's words put before a colon ("Invalid arguments for tool get_tokens:",
        # "Error executing tool rotate_secret:", "Error calling tool 'get_token':";
        # gateway/classify/sdk_wrappers.py): that colon ends the wrapping, and what follows
        # is the tool's message, not a value.
        pair = (
            rf"(?i){_NOT_A_TOOL_NAME}(?:{name})[\w\-.]{{0,40}}+"
            rf"(?:[ \t]+[\w\-.]{{1,20}}+){{0,2}}?{_SEPARATOR}"
            rf"(?:(?:{_SCHEMES})[ \t]+)?(?:{_VALUE})"
        )
        rules.append(Rule(pair, (hint,)))
    return tuple(rules)


@dataclass(frozen=True, slots=True)
class RuleSet:
    """Rules in their order, and which of them each hint lets run."""

    rules: tuple[Rule, ...]
    hints: tuple[str, ...]
    word_hints: tuple[str, ...]
    """The hints of `long_word` rules only."""
    by_hint: Mapping[str, frozenset[int]]

    @classmethod
    def of(cls, rules: tuple[Rule, ...]) -> RuleSet:
        by_hint: dict[str, set[int]] = {}
        for index, rule in enumerate(rules):
            for hint in rule.hints:
                by_hint.setdefault(hint, set()).add(index)
        frozen = {hint: frozenset(indices) for hint, indices in by_hint.items()}
        words = {h for h, found in frozen.items() if all(rules[i].long_word for i in found)}
        return cls(rules, tuple(h for h in frozen if h not in words), tuple(sorted(words)), frozen)

    def hinted(self, lowered: str) -> tuple[Rule, ...]:
        """The rules whose hints the lower-cased text holds, in their order: one substring
        test per hint, in C; the hints of credential formats only in its long words."""
        present = [self.by_hint[hint] for hint in filter(lowered.__contains__, self.hints)]
        if self.word_hints:
            # str.split is 5 times faster than a regex search for the long runs.
            words = " ".join([word for word in lowered.split() if len(word) >= LONG_WORD])
            if words:
                hints = filter(words.__contains__, self.word_hints)
                present.extend(self.by_hint[hint] for hint in hints)
        if not present:
            return ()
        chosen = sorted(frozenset().union(*present))
        return tuple(self.rules[index] for index in chosen if self.rules[index].requires in lowered)


BUILTIN = RuleSet.of(_rules())
NO_RULES = RuleSet.of(())
BUILTIN_HINTS = (*BUILTIN.hints, *BUILTIN.word_hints)
_NAME_HINTS = tuple(hint for hint, _ in NAME_GROUPS)
_SECRET_NAME = regex.compile(SECRET_NAMES, regex.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Redactor:
    rules: RuleSet
    custom: tuple[regex.Pattern[str], ...] = ()
    """`redaction.patterns`: no hint is known for them, so they always run."""

    @classmethod
    def build(cls, spec: RedactionSpec) -> Redactor:
        rules = BUILTIN if spec.builtin else NO_RULES
        return cls(rules, tuple(regex.compile(p) for p in spec.patterns))

    def text(self, value: str) -> str:
        """`value` with every secret masked; a pattern that times out masks the whole text."""
        return self._masked(value, self.rules)

    def failure(self, failure: Failure) -> Failure:
        """`failure` with its message and fields redacted (the same object when clean)."""
        message = self.text(failure.message)
        fields = tuple(FieldError(self.text(f.field), self.text(f.message)) for f in failure.fields)
        if message == failure.message and fields == failure.fields:
            return failure
        return dataclasses.replace(failure, message=message, fields=fields)

    def body(self, text: str) -> Raw | str:
        """A body as the gateway copies it: a JSON document redacted as JSON and written as
        strict JSON (the upstream's own text when nothing was masked, so its numbers and
        spacing stay), anything else redacted as text."""
        try:
            document = read(text)
        except ValueError:
            return self.text(text)
        own = Raw(text.strip(JSON_SPACE))
        if "\\" in text:  # an escape may spell a name or a hint: every rule may be needed
            rules, names = self.rules.rules, bool(self.rules.rules)
        else:
            # Every name and string is a piece of the text itself: a rule whose hints the
            # whole text lacks cannot match any of them, and is never tried.
            lowered = text.lower()
            rules = self.rules.hinted(lowered)
            names = bool(self.rules.rules) and any(map(lowered.__contains__, _NAME_HINTS))
        if not rules and not names and not self.custom:
            return own
        clean = _Walk(self, rules, names).value(document)
        return own if clean is document else Raw(write(clean))

    def copy(self, body: bytes | None, cap: int) -> tuple[str, bool]:
        """A body copied somewhere new (a capture file, a gap's sample): redacted whole, then
        cut at `cap` bytes (a secret cut in two would no longer look like one); and whether
        it was cut."""
        raw = body or b""
        copied = self.body(raw.decode("utf-8", "replace"))
        clean = copied.text if isinstance(copied, Raw) else copied
        if len(raw) <= cap:
            return clean, False
        return clean.encode("utf-8")[:cap].decode("utf-8", "ignore"), True

    def _masked(self, value: str, rules: RuleSet) -> str:
        """`value` with the matches of `rules` (those it holds a hint of) and of the custom
        patterns masked."""
        hinted = rules.hinted(value.lower()) if rules.rules else ()
        several = "\n" in value
        for rule in hinted:
            if several or not rule.lines:
                value = _sub(rule.pattern, value)
        for pattern in self.custom:
            value = _sub(pattern, value)
        return value


@dataclass(frozen=True, slots=True)
class _Walk:
    """One JSON document redacted value by value, with the rules its text can match."""

    redactor: Redactor
    rules: tuple[Rule, ...]
    names: bool
    """Member names are checked: the text holds a hint of a secret name."""

    def value(self, value: Any) -> Any:
        """A value as `json_text.read` gives it, redacted; the same object when clean (and
        nothing new is built until something is masked).

        A member whose name says secret has its value masked whatever its type (a list of
        keys, an object of credentials, a number PIN); null and "" are kept, having nothing
        to hide. Names are kept. A string that holds a JSON document is redacted as one."""
        if isinstance(value, Members):
            for index, (name, item) in enumerate(value):
                clean = self._member(name, item)
                if clean is not item:
                    members = Members(value[:index])
                    members.append((name, clean))
                    members.extend((n, self._member(n, i)) for n, i in value[index + 1 :])
                    return members
            return value
        if isinstance(value, list):
            for index, item in enumerate(value):
                clean = self.value(item)
                if clean is not item:
                    return [*value[:index], clean, *map(self.value, value[index + 1 :])]
            return value
        if isinstance(value, str) and not isinstance(value, Number):
            return self._string(value)
        return value

    def _member(self, name: str, item: Any) -> Any:
        if self.names and item is not None and item != "" and _SECRET_NAME.search(name):
            return MASK
        return self.value(item)

    def _string(self, value: str) -> str:
        if value.lstrip(JSON_SPACE)[:1] in ("{", "["):
            try:
                document = read(value)
            except ValueError:
                pass
            else:
                clean = self.value(document)
                return value if clean is document else write(clean)
        lowered = value.lower()
        masked = value
        for rule in self.rules:
            if rule.holds(value, lowered):
                masked = _sub(rule.pattern, masked)
        for pattern in self.redactor.custom:
            masked = _sub(pattern, masked)
        return value if masked == value else masked


def _sub(pattern: regex.Pattern[str], value: str) -> str:
    """`value` with the matches of `pattern` masked; the whole text past the time budget."""
    try:
        masked: str = pattern.sub(_mask, value, timeout=TIMEOUT_S)
    except TimeoutError:
        return MASK
    return masked


def _mask(match: regex.Match[str]) -> str:
    """The match with its `secret` group masked; all of it when there is none, or with
    a custom pattern's `keep` group kept in front."""
    groups = match.groupdict()
    if groups.get("secret") is not None:
        start, end = match.span("secret")
        whole_start = match.start()
        text: str = match.group()
        return text[: start - whole_start] + MASK + text[end - whole_start :]
    return (groups.get("keep") or "") + MASK


__all__ = [
    "BUILTIN",
    "BUILTIN_HINTS",
    "MASK",
    "SECRET_NAMES",
    "TOKEN_FORMATS",
    "Redactor",
    "Rule",
    "RuleSet",
]
