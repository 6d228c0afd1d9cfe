"""What one scenario came to, live or replayed, and the answers it was judged on."""

from __future__ import annotations

import base64
import gzip
import re
import zlib
from dataclasses import dataclass, field
from typing import Any, Literal

from tests.first_action.agent import Reading, words_kept
from tests.first_action.model import Action, Expect, HeldOut

Suite = Literal["http", "mcp"]
Got = Action | Literal["success"]

_SDK_PREFIX = re.compile(r"\A\s*Error executing tool [\w.-]+\s*:?\s*", re.IGNORECASE)
_NO_WORDS = re.compile(
    r"\A\W*(?:(?:error|an? (?:unknown |unexpected )?error(?: occurred)?|unknown error|"
    r"internal(?: server)? error|something went wrong|(?:tool |request )?(?:execution )?failed|"
    r"could not fetch the resource|failed to fetch|none|null|undefined)\W*)*\Z",
    re.IGNORECASE,
)


def says_nothing(text: str) -> bool:
    """A tool failure's text that carries no words to act on once the SDK's wrapping is
    gone: `Error executing tool X`, `Could not fetch the resource.`, `Error: undefined`. Such
    a failure keeps the terminal default; the report counts it apart, so the first-action
    rate on texts with words says what a reading can reach (docs/packs/corpus.md#the-report)."""
    return len(text) < 400 and bool(_NO_WORDS.match(_SDK_PREFIX.sub("", text, count=1)))


@dataclass(frozen=True)
class Answer:
    """An HTTP answer as received (body still content-coded), or the fault that ended it."""

    status: int | None
    headers: tuple[tuple[str, str], ...]
    body: bytes
    fault: str | None = None
    phrase: str = ""

    def header_map(self) -> dict[str, str]:
        return {name.lower(): value for name, value in self.headers}

    def text(self) -> bytes:
        """The body with its content coding undone (gzip, deflate), to look for words in."""
        coding = self.header_map().get("content-encoding", "").strip().lower()
        try:
            if coding in ("gzip", "x-gzip"):
                return gzip.decompress(self.body)
            if coding == "deflate":
                try:
                    return zlib.decompress(self.body)
                except zlib.error:
                    return zlib.decompress(self.body, -zlib.MAX_WBITS)
        except (OSError, EOFError, zlib.error):
            return self.body
        return self.body

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "reason": self.phrase}
        out["headers"] = [list(h) for h in self.headers]
        try:
            out["body"] = self.body.decode("utf-8")
        except UnicodeDecodeError:
            out["body_base64"] = base64.b64encode(self.body).decode()
        if self.fault:
            out["fault"] = self.fault
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Answer:
        if "body_base64" in data:
            body = base64.b64decode(data["body_base64"])
        else:
            body = str(data.get("body", "")).encode("utf-8")
        headers = tuple((str(n), str(v)) for n, v in data.get("headers", []))
        return cls(data.get("status"), headers, body, data.get("fault"), data.get("reason", ""))


@dataclass
class Outcome:
    suite: Suite
    stack: str
    scenario: str
    expect: Expect
    reason: str
    words: list[str]
    upstream: str = ""
    kind: str = ""
    got: Got | None = None
    reading: Reading | None = None
    identical: bool | None = None
    reported_as_success: bool = False
    problems: list[str] = field(default_factory=list)
    held_out: HeldOut | None = None
    """The held-out set the stack belongs to, if any (docs/packs/corpus.md#the-held-out-sets)."""
    wordless: bool = False
    """The failure's text says nothing beyond that it failed (`says_nothing`)."""

    @property
    def failure(self) -> bool:
        return self.expect != "success"

    @property
    def scored(self) -> bool:
        """A failure the upstream itself reports as a success (HTTP 2xx, `isError: false`)
        passes through untouched by contract (docs/spec.md#what-mendpoint-is); it is counted
        apart, not against the first-action rate."""
        return self.failure and not self.reported_as_success

    @property
    def right(self) -> bool:
        if self.expect == "success":
            return self.identical is True
        return self.got == self.expect

    @property
    def kept(self) -> bool | None:
        """The upstream's words reached error.message; None when the body has no such words."""
        if not self.failure or not self.words:
            return None
        return self.reading is not None and words_kept(self.words, self.reading.message)

    def to_json(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "stack": self.stack,
            "scenario": self.scenario,
            "expect": self.expect,
            "got": self.got,
            "right": self.right,
            "reported_as_success": self.reported_as_success,
            "kept": self.kept,
            "kind": self.kind,
            "upstream": self.upstream,
            "gateway": self.reading.summary() if self.reading else None,
            "code": self.reading.code if self.reading else None,
            "reason": self.reason,
            "problems": self.problems,
            "held_out": self.held_out,
            "wordless": self.wordless,
        }
