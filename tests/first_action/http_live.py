"""One HTTP stack, live: start it and a gateway on the embedded default in front of it, send
every scenario direct and through, judge the through answer as the weakest agent would, and
keep the direct answers for the replay (recorded/http/STACK.json).

Each scenario is sent direct first, then through, against the same running stack: a failure
changes nothing upstream, so the two must get the same status (else the scenario is reported
as unstable). A success is sent direct twice, so headers that differ between two direct answers
(a fresh cookie, a timestamp) are not held against the gateway; the rest must be equal byte for
byte, less the differences docs/transparency.md lists.
"""

from __future__ import annotations

import asyncio
import html
import json
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from yarl import URL

from tests.first_action.agent import normalised, read_http
from tests.first_action.environment import MENDPOINT, places, run_base
from tests.first_action.model import STACKS_DIR, HttpScenario, HttpStack, Places, RequestSpec
from tests.first_action.outcome import Answer, Outcome
from tests.first_action.processes import Group, StartFailed, group, run_command
from tests.support.differential import INTENDED
from tests.support.ports import free_port

REQUEST_TIMEOUT_S = 30.0
SCENARIO_HEADER = "X-Corpus-Scenario"


@dataclass(frozen=True)
class Sent:
    """A request as it goes on the wire (placeholders filled)."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes | None

    def to_json(self) -> dict[str, Any]:
        body = self.body.decode("utf-8", errors="replace") if self.body is not None else None
        return {
            "method": self.method,
            "path": self.path,
            "headers": [list(h) for h in self.headers],
            "body": body,
        }


def build(spec: RequestSpec, fill: Places) -> Sent:
    headers = {"Accept": spec.accept}
    body: bytes | None = None
    if spec.json_body is not None:
        body = json.dumps(fill.fill_json(spec.json_body)).encode()
        headers["Content-Type"] = "application/json"
    elif spec.body is not None:
        body = fill.fill(spec.body).encode()
    elif spec.body_bytes is not None:
        body = b"x" * spec.body_bytes
    headers.update({k: fill.fill(v) for k, v in spec.headers.items()})
    return Sent(spec.method, fill.fill(spec.path), tuple(headers.items()), body)


async def send(session: aiohttp.ClientSession, base: str, sent: Sent) -> Answer:
    url = URL(base.rstrip("/") + sent.path, encoded=True)
    try:
        async with session.request(
            sent.method,
            url,
            headers=list(sent.headers),
            data=sent.body,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
        ) as response:
            body = await response.read()
            headers = tuple(
                (name.decode("latin-1"), value.decode("latin-1"))
                for name, value in response.raw_headers
            )
            return Answer(response.status, headers, body, phrase=response.reason or "")
    except (aiohttp.ClientError, TimeoutError) as exc:
        return Answer(None, (), b"", fault=f"{type(exc).__name__}: {exc}")


def client() -> aiohttp.ClientSession:
    """A fresh connection per request, bodies as received (content coding kept)."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(force_close=True), auto_decompress=False
    )


@dataclass
class StackRun:
    """A stack's outcomes, its recorded direct answers, and why it did not run, if it did not."""

    stack: str
    outcomes: list[Outcome]
    recording: dict[str, Any]
    failed: str | None = None
    seconds: float = 0.0


async def run_stack(stack: HttpStack) -> StackRun:
    started = time.monotonic()
    tmp = run_base("http", stack.name)
    fill = places(tmp)
    try:
        async with group(tmp) as running:
            await start_stack(stack, fill, running, tmp)
            upstream = fill.fill(stack.upstream)
            gateway = await start_gateway(running, upstream, tmp)
            outcomes, recording = await run_scenarios(stack, fill, upstream, gateway)
    except StartFailed as exc:
        return StackRun(stack.name, [], {}, failed=str(exc))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return StackRun(stack.name, outcomes, recording, seconds=time.monotonic() - started)


async def start_stack(stack: HttpStack, fill: Places, running: Group, tmp: Path) -> None:
    for name in stack.templates:
        text = (STACKS_DIR / name).read_text("utf-8")
        (tmp / Path(name).name).write_text(fill.fill(text), "utf-8")
    for index, argv in enumerate(stack.prepare):
        await run_command(fill.fill_all(argv), str(tmp), {}, tmp / f"prepare-{index}.log")
    for index, process in enumerate(stack.processes):
        await running.start(
            f"{stack.name}-{index}",
            fill.fill_all(process.command),
            port=int(fill.fill(process.port)) if process.port else None,
            cwd=fill.fill(process.cwd) if process.cwd else str(tmp),
            env={k: fill.fill(v) for k, v in process.env.items()},
            timeout_s=process.start_timeout_s,
            ready_path=process.ready_path,
        )


async def start_gateway(running: Group, upstream: str, tmp: Path) -> str:
    """`mendpoint serve --upstream URL`: the embedded default, no config, as a new user runs it."""
    port = free_port()
    argv = [str(MENDPOINT), "serve", "--upstream", upstream]
    argv += ["--listen", f"127.0.0.1:{port}", "--admin", "off"]
    env = {"MENDPOINT_LOG_LEVEL": "warning"}
    await running.start("gateway", argv, port=port, cwd=str(tmp), env=env, timeout_s=30)
    return f"http://127.0.0.1:{port}"


async def run_scenarios(
    stack: HttpStack, fill: Places, upstream: str, gateway: str
) -> tuple[list[Outcome], dict[str, Any]]:
    outcomes: list[Outcome] = []
    recorded: list[dict[str, Any]] = []
    async with client() as session:
        for scenario in stack.scenarios:
            for setup in scenario.setup:
                await send(session, upstream, build(setup, fill))
            if scenario.pause_s:
                await asyncio.sleep(scenario.pause_s)
            sent = build(scenario.request, fill)
            direct = await send(session, upstream, sent)
            again = await send(session, upstream, sent) if not scenario_fails(scenario) else None
            through = await send(session, gateway, sent)
            outcome = judge(stack.name, scenario, direct, through, again)
            outcome.held_out = stack.held_out
            outcomes.append(outcome)
            recorded.append(
                {"id": scenario.id, "request": sent.to_json(), "answer": direct.to_json()}
            )
    return outcomes, {"stack": stack.name, "scenarios": recorded}


def scenario_fails(scenario: HttpScenario) -> bool:
    return scenario.expect != "success"


def judge(
    stack: str,
    scenario: HttpScenario,
    direct: Answer,
    through: Answer,
    again: Answer | None = None,
) -> Outcome:
    """The agent's first action on the through answer, against what was written down."""
    outcome = Outcome(
        "http",
        stack,
        scenario.id,
        scenario.expect,
        scenario.reason,
        scenario.words,
        upstream=describe(direct),
        kind=str(direct.status or direct.fault),
    )
    if direct.fault:
        outcome.problems.append(f"direct request failed: {direct.fault}")
    if through.fault:
        outcome.problems.append(f"through request failed: {through.fault}")
        return outcome
    if direct.status != through.status:
        outcome.problems.append(f"status direct {direct.status}, through {through.status}")
    missing = [w for w in scenario.words if not in_body(w, direct.text())]
    if missing:
        outcome.problems.append(f"words not in the upstream's body: {missing}")
    if scenario.expect == "success":
        outcome.got = "success" if (through.status or 500) < 400 else None
        differences = differ(direct, through, again)
        outcome.identical = not differences
        outcome.problems.extend(differences)
        return outcome
    assert through.status is not None
    if through.status < 400:
        outcome.got = "success"
        outcome.reported_as_success = direct.status is not None and direct.status < 400
        return outcome
    outcome.reading = read_http(through.header_map(), through.body)
    outcome.got = outcome.reading.action
    return outcome


def describe(answer: Answer) -> str:
    if answer.fault:
        return answer.fault
    text = answer.text()[:160].decode("utf-8", errors="replace").replace("\n", " ")
    return f"{answer.status} {answer.header_map().get('content-type', '-')} {text}"


def in_body(word: str, body: bytes) -> bool:
    """A word is in the body as text (HTML entities undone), or in one of its JSON strings."""
    text = body.decode("utf-8", errors="replace")
    if normalised(word) in normalised(html.unescape(text)):
        return True
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return normalised(word) in normalised(" ".join(strings_of(value)))


def strings_of(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for item in value for s in strings_of(item)]
    if isinstance(value, dict):
        return [s for item in value.values() for s in strings_of(item)]
    return []


def differ(direct: Answer, through: Answer, again: Answer | None) -> list[str]:
    """Differences between a success direct and through, less the intended and the volatile."""
    problems = []
    volatile = set(INTENDED)
    if again is not None:
        volatile |= changed_headers(direct.header_map(), again.header_map())
        if again.body != direct.body:
            problems.append("the body differs between two direct requests (not deterministic)")
            return problems
    if through.status != direct.status:
        problems.append(f"success status {direct.status} became {through.status}")
    if through.body != direct.body:
        problems.append(f"success body differs ({len(direct.body)} vs {len(through.body)} B)")
    kept = [(n.lower(), v) for n, v in direct.headers if n.lower() not in volatile]
    got = [(n.lower(), v) for n, v in through.headers if n.lower() not in volatile]
    if kept != got:
        problems.append(f"success headers differ: direct {kept} through {got}")
    return problems


def changed_headers(first: Mapping[str, str], second: Mapping[str, str]) -> set[str]:
    return {name for name in first.keys() | second.keys() if first.get(name) != second.get(name)}
