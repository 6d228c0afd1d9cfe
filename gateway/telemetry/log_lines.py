"""One log line, as JSON or as logfmt text, and the process's handler that writes events so.

`mendpoint serve` and `mendpoint stdio` log through the same handler (`setup_events`), so an
operator's log shipper reads both alike (docs/operations.md#logs). This module imports no
metrics and no model: `mendpoint stdio` sets it up the moment its server is started
(docs/performance.md#mcp-start-up). The access log, which only `serve` writes, is
gateway.telemetry.logs'.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from typing import Any, Literal

import orjson

LogFormat = Literal["json", "text"]
LEVELS = ("debug", "info", "warning", "error")
FORMATS: tuple[LogFormat, ...] = ("json", "text")


class Stamp:
    """The UTC timestamp both formats begin with, formatted once per second."""

    def __init__(self) -> None:
        self._second = -1
        self._second_text = ""

    def text(self, created: float, msecs: float) -> str:
        second = int(created)
        if second != self._second:
            self._second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = second
        return f"{self._second_text}.{int(msecs):03d}Z"

    def now(self) -> str:
        """As a LogRecord made now would be stamped (its `msecs`, as logging computes it)."""
        created = time.time()
        return self.text(created, int((created - int(created)) * 1000))


_ORJSON_AS_JSON = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
"""What orjson would write otherwise than `json.dumps(default=str)` goes to `default=str`."""


def json_line(stamp: str, level: str, logger: str, msg: str, fields: object) -> str:
    """One JSON object, as `json.dumps` writes it compactly (tests/telemetry/test_log_lines):
    orjson takes 0.6 µs where json takes 7 for an access line (docs/performance.md#the-access-log);
    what it refuses (a lone surrogate, an integer past 64 bits) json writes as before."""
    payload: dict[str, Any] = {"ts": stamp, "level": level.lower(), "logger": logger, "msg": msg}
    if isinstance(fields, dict):
        payload.update(fields)
    try:
        return orjson.dumps(payload, default=str, option=_ORJSON_AS_JSON).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str)


def text_line(stamp: str, level: str, logger: str, msg: str, fields: object) -> str:
    line = f"{stamp} {level} {logger}: {msg}"
    if isinstance(fields, dict):
        pairs = [f"{key}={logfmt_value(v)}" for key, v in fields.items() if v is not None]
        if pairs:
            line = " ".join((line, *pairs))
    return line


class _StampedFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__()
        self._stamp = Stamp()


class JsonFormatter(_StampedFormatter):
    """One JSON object per line; structured fields ride in `record.fields`."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = self._stamp.text(record.created, record.msecs)
        fields = getattr(record, "fields", None)
        if record.exc_info:
            fields = {**(fields if isinstance(fields, dict) else {})}
            fields["exc"] = self.formatException(record.exc_info)
        return json_line(stamp, record.levelname, record.name, record.getMessage(), fields)


class TextFormatter(_StampedFormatter):
    """`TS LEVEL logger: message key=value …`, for a person reading a terminal.

    The structured fields follow the message as `key=value` pairs (logfmt), in the order the
    JSON line has them; a field that is null there is left out. A value goes bare when it is
    printable text without a space, quote, `=` or backslash, and JSON-quoted otherwise, with
    every control character escaped: a field value comes from a request (a path with a
    decoded `%0A`), and must not start a line that looks like another record.
    """

    def format(self, record: logging.LogRecord) -> str:
        stamp = self._stamp.text(record.created, record.msecs)
        fields = getattr(record, "fields", None)
        line = text_line(stamp, record.levelname, record.name, record.getMessage(), fields)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


_NEEDS_QUOTES = frozenset(' "=\\')


def logfmt_value(value: object) -> str:
    """One field value as logfmt writes it: bare where that is unambiguous, else quoted."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if not isinstance(value, str):
        return json.dumps(value, separators=(",", ":"), default=str)
    if value and value.isprintable() and _NEEDS_QUOTES.isdisjoint(value):
        return value
    return json.dumps(value)  # ASCII only: no control, line or paragraph separator survives


def chosen(
    flag_level: str | None,
    config_level: str | None,
    config_format: str | None,
    env: Mapping[str, str] = os.environ,
) -> tuple[str, LogFormat]:
    """The level and format a command logs in: the `--log-level` flag wins over
    MENDPOINT_LOG_LEVEL and MENDPOINT_LOG_FORMAT, which win over the config's `log:` block,
    which wins over info and json. ValueError names a variable set to neither format."""
    level = flag_level or env.get("MENDPOINT_LOG_LEVEL") or config_level or "info"
    fmt = env.get("MENDPOINT_LOG_FORMAT") or config_format or "json"
    if fmt not in FORMATS:
        raise ValueError("MENDPOINT_LOG_FORMAT must be json or text")
    return level, "json" if fmt == "json" else "text"


def setup_events(level: str, fmt: LogFormat) -> None:
    """Configure the root handler once for the process (stderr).

    Records skip what no format here prints: the caller's file and line (a stack walk per
    record), thread and process names. The logging HOWTO's "Optimization" section names
    these switches; with the access log on they cut its cost by about a third.
    """
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    if sys.version_info >= (3, 12):
        logging.logAsyncioTasks = False  # current_task() per record
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
