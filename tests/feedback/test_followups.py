"""Follow-ups: scripted agents through a real gateway, and the exact outcome counts."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.cli import main
from gateway.config.models import FollowupsSpec
from gateway.feedback.followups import (
    Answered,
    Attempt,
    FollowupBook,
    OpenFailure,
    Outcome,
    decide,
    merge,
)
from gateway.feedback.readings import reading
from gateway.feedback.target_filter import where_of
from gateway.telemetry.metrics import REGISTRY
from tests.support.agents import EXPECTED, counts_by_code, orders_app, run_all
from tests.support.gateway import (
    RunningGateway,
    StartGateway,
    StartUpstream,
    route_config,
    start_process,
    stop_process,
    wait_ready,
    write_config,
)
from tests.support.ports import free_port

WINDOW_S = 2.0


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def followups(gateway: RunningGateway) -> dict[str, Any]:
    assert gateway.server.admin_address is not None
    host, port = gateway.server.admin_address
    async with gateway.session.get(f"http://{host}:{port}/followups") as response:
        assert response.status == 200
        body: dict[str, Any] = await response.json()
        return body


async def settled_table(gateway: RunningGateway) -> dict[str, Any]:
    """The table once every failure has had its window to be followed up."""
    await asyncio.sleep(WINDOW_S + 0.6)
    return await followups(gateway)


async def test_scripted_agents_get_exactly_one_outcome_per_failure(
    start_gateway: StartGateway, start_upstream: StartUpstream
) -> None:
    upstream = await start_upstream(orders_app())
    config = route_config(upstream, name="orders") | {"followups": {"window_s": WINDOW_S}}
    gateway = await start_gateway(config, admin="127.0.0.1:0")
    before = {
        (code, outcome): metric(
            "mendpoint_followups_total", route="orders", code=code, outcome=outcome
        )
        for code, row in EXPECTED.items()
        for outcome in row
        if outcome != "failures"
    }
    await run_all(gateway.url)
    table = await settled_table(gateway)
    assert table["window_s"] == WINDOW_S
    assert counts_by_code(table["codes"]) == EXPECTED
    for (code, outcome), value in before.items():
        after = metric("mendpoint_followups_total", route="orders", code=code, outcome=outcome)
        assert after - value == EXPECTED[code][outcome], (code, outcome)
    # Wasted attempts first: BAD_REQUEST has 3, RATE_LIMITED 1, CONFLICT none.
    assert [row["code"] for row in table["codes"]] == ["BAD_REQUEST", "RATE_LIMITED", "CONFLICT"]
    bad = table["codes"][0]
    assert bad["rule"] == "http-400"
    assert bad["recovery_p50_ms"] is not None and bad["recovery_p50_ms"] > 0
    assert table["codes"][2]["recovery_p50_ms"] is None


async def test_the_follow_up_access_line_names_the_failure_and_outcome(
    start_gateway: StartGateway,
    start_upstream: StartUpstream,
    caplog: pytest.LogCaptureFixture,
) -> None:
    upstream = await start_upstream(orders_app())
    gateway = await start_gateway(route_config(upstream, name="orders"))
    first = await gateway.request("POST", "/orders", json={"qty": -1})
    failed_id = first.headers["X-Request-Id"]
    with caplog.at_level("INFO", logger="mendpoint.access"):
        second = await gateway.request("POST", "/orders", json={"qty": 2})
    assert second.status == 201
    lines = [r.__dict__["fields"] for r in caplog.records if r.name == "mendpoint.access"]
    assert lines[-1]["follows"] == failed_id
    assert lines[-1]["followup"] == "recovered"


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        ({"Authorization": "Bearer old"}, {"Authorization": "Bearer new"}, "recovered"),
        (
            {"X-Request-Id": "one-id", "X-Refuse": "1"},
            {"X-Request-Id": "another-id", "X-Refuse": "1"},
            "retried_unchanged",
        ),
        ({"Cookie": "s=1"}, {"Cookie": "s=2"}, "recovered"),
    ],
    ids=["refreshed-token-differs", "new-request-id-is-identical", "cookie-differs"],
)
async def test_credentials_make_a_request_different_other_headers_do_not(
    start_gateway: StartGateway,
    start_upstream: StartUpstream,
    first: dict[str, str],
    second: dict[str, str],
    expected: str,
) -> None:
    async def handler(request: web.Request) -> web.Response:
        headers = request.headers
        refused = (
            headers.get("Authorization") == "Bearer old"
            or headers.get("Cookie") == "s=1"
            or "X-Refuse" in headers
        )
        if refused:
            return web.json_response({"message": "no"}, status=400)
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/thing", handler)
    upstream = await start_upstream(app)
    gateway = await start_gateway(route_config(upstream, name="creds"))
    code = "BAD_REQUEST"
    before = metric("mendpoint_followups_total", route="creds", code=code, outcome=expected)
    await gateway.request("GET", "/thing", headers=first)
    await gateway.request("GET", "/thing", headers=second)
    after = metric("mendpoint_followups_total", route="creds", code=code, outcome=expected)
    assert after - before == 1


async def test_another_target_or_method_is_not_a_follow_up(
    start_gateway: StartGateway, start_upstream: StartUpstream
) -> None:
    upstream = await start_upstream(orders_app())
    config = route_config(upstream, name="other") | {"followups": {"window_s": 0.4}}
    gateway = await start_gateway(config, admin="127.0.0.1:0")
    await gateway.request("POST", "/orders", json={"qty": -1})
    await gateway.request("POST", "/orders?x=1", json={"qty": 2})  # another target
    await gateway.request("GET", "/orders")  # another method (405, not classified)
    await asyncio.sleep(1.2)
    table = await followups(gateway)
    row = counts_by_code(table["codes"])["BAD_REQUEST"]
    assert row["failures"] == 1 and row["abandoned"] == 1


async def test_off_tracks_nothing_and_a_reload_turns_it_on(
    start_gateway: StartGateway, start_upstream: StartUpstream
) -> None:
    upstream = await start_upstream(orders_app())
    config = route_config(upstream, name="toggle") | {"followups": {"enabled": False}}
    gateway = await start_gateway(config, admin="127.0.0.1:0")
    await gateway.request("POST", "/orders", json={"qty": -1})
    await gateway.request("POST", "/orders", json={"qty": 1})
    assert (await followups(gateway))["codes"] == []
    assert gateway.server.config_path is not None
    config["followups"] = {"enabled": True, "window_s": 5}
    written = Path(gateway.server.config_path)
    write_config(written.parent, config, written.name)
    assert await gateway.server.reload()
    await gateway.request("POST", "/orders", json={"qty": -1})
    await gateway.request("POST", "/orders", json={"qty": 1})
    rows = counts_by_code((await followups(gateway))["codes"])
    assert rows["BAD_REQUEST"]["failures"] == 1 and rows["BAD_REQUEST"]["recovered"] == 1


def entry(**fields: Any) -> OpenFailure:
    base: dict[str, Any] = {
        "key": "k",
        "identity": "i",
        "request_id": "r",
        "route": "api",
        "code": "RATE_LIMITED",
        "rule": "http-429",
        "retryable": True,
        "retry_after_ms": 1000,
        "answered_at": 10.0,
        "chain_started": 10.0,
        "origin": 1,
    }
    return OpenFailure(**(base | fields))


@pytest.mark.parametrize(
    ("failure", "identical", "started", "answered", "outcome"),
    [
        (entry(retryable=False), True, 20.0, Answered(400, "X"), Outcome.RETRIED_UNCHANGED),
        (entry(), True, 10.5, Answered(429, "RATE_LIMITED"), Outcome.RETRIED_TOO_EARLY),
        (entry(), True, 11.5, Answered(429, "RATE_LIMITED"), Outcome.RETRIED_AS_ADVISED),
        (entry(), True, 10.1, Answered(200), Outcome.RETRIED_AS_ADVISED),
        (entry(retry_after_ms=None), True, 10.0, Answered(503, "X"), Outcome.RETRIED_AS_ADVISED),
        (entry(), False, 10.1, Answered(200), Outcome.RECOVERED),
        (entry(), False, 12.0, Answered(429, "RATE_LIMITED"), Outcome.FAILED_AGAIN_SAME_CODE),
        (entry(), False, 12.0, Answered(400, "BAD_REQUEST"), Outcome.FAILED_DIFFERENTLY),
        (entry(), False, 12.0, Answered(404), Outcome.FAILED_DIFFERENTLY),
    ],
    ids=[
        "unchanged-not-retryable",
        "too-early",
        "after-the-delay",
        "identical-success-after-retryable",
        "retryable-without-delay",
        "different-success",
        "same-code",
        "other-code",
        "unclassified-failure",
    ],
)
def test_the_outcome_table(
    failure: OpenFailure, identical: bool, started: float, answered: Answered, outcome: Outcome
) -> None:
    assert decide(failure, identical, started, answered) is outcome


def test_the_book_is_bounded_and_evicts_the_least_recent() -> None:
    now = [0.0]
    book = FollowupBook(FollowupsSpec(max_tracked=2), clock=lambda: now[0])
    for n in range(3):
        attempt = Attempt(f"k{n}", f"i{n}", "bounded", started=0.0)
        book.settle(attempt, Answered(400, "BAD", "r", False, None), f"req{n}", None)
    assert book.pending("k0") is None
    assert book.pending("k1") is not None and book.pending("k2") is not None
    assert metric("mendpoint_followups_evicted_total", route="bounded") >= 1
    now[0] = 1000.0
    assert book.sweep() == 2
    assert not book.watching("bounded")


def test_only_a_request_to_a_failed_target_is_looked_up_while_a_failure_is_open() -> None:
    """docs/operations.md#follow-ups: the counting filter of (route, method, target)."""
    book = FollowupBook(FollowupsSpec())
    failed = where_of("orders", "GET", "/v1/orders/7")
    others = [
        where_of("orders", m, t) for m, t in (("GET", "/v1/items/1"), ("POST", "/v1/orders/7"))
    ]
    others = [w for w in others if w != failed]  # a slot shared by chance is only asked
    assert others
    attempt = Attempt("k", "i", "orders", 0.0, failed)
    book.settle(attempt, Answered(404, "NOT_FOUND", "r"), "first", None)
    assert book.watching("orders") and book.may_follow("orders", failed)
    assert not any(book.may_follow("orders", w) for w in others)
    followed = book.pending("k")
    assert followed is not None and followed.where == failed
    book.settle(Attempt("k", "i2", "orders", 0.5, failed), Answered(200), "second", followed)
    assert not book.watching("orders") and not book.may_follow("orders", failed)


def test_a_replica_makes_every_request_on_its_route_looked_up() -> None:
    """A sibling's failure names no target this process can hash: its route is asked always."""
    one, two = FollowupBook(FollowupsSpec(), origin=1), FollowupBook(FollowupsSpec(), origin=2)
    one.publish = two.apply
    slot = where_of("orders", "GET", "/v1/orders/7")
    one.settle(Attempt("k", "i", "orders", 0.0, slot), Answered(429, "LIMITED", "r"), "a", None)
    entry = two.pending("k")
    assert entry is not None and entry.where == -1  # the sender's slot means nothing here
    elsewhere = where_of("orders", "GET", "/v1/anything/else")
    assert two.may_follow("orders", elsewhere) and two.may_follow("orders", slot)
    assert not two.may_follow("items", elsewhere)
    two.apply({"op": "close", "key": "k", "request_id": "a"})
    assert not two.may_follow("orders", elsewhere) and not two.watching("orders")


def test_a_full_filter_slot_stays_asked() -> None:
    """255 failures in one slot saturate it: after they settle it is still asked, never missed."""
    book = FollowupBook(FollowupsSpec())
    slot = where_of("orders", "GET", "/v1/orders/7")
    for n in range(300):
        book.settle(Attempt(f"k{n}", "i", "orders", 0.0, slot), Answered(400, "B", "r"), "x", None)
    for n in range(300):
        followed = book.pending(f"k{n}")
        book.settle(Attempt(f"k{n}", "j", "orders", 0.1, slot), Answered(200), "y", followed)
    assert not book.watching("orders") and book.may_follow("orders", slot)


def test_a_replica_is_settled_elsewhere_and_not_counted_twice() -> None:
    """Two workers' books joined as the supervisor joins them: open in one, settle in the other."""
    now = [0.0]
    one = FollowupBook(FollowupsSpec(), clock=lambda: now[0], origin=1)
    two = FollowupBook(FollowupsSpec(), clock=lambda: now[0], origin=2)
    one.publish, two.publish = two.apply, one.apply
    attempt = Attempt("k", "i", "replica", started=0.0)
    one.settle(attempt, Answered(400, "BAD", "r", False, None), "first", None)
    followed = two.pending("k")
    assert followed is not None and followed.request_id == "first"
    settled = two.settle(Attempt("k", "j", "replica", 0.5), Answered(200), "second", followed)
    assert settled is not None and settled.outcome is Outcome.RECOVERED
    assert one.pending("k") is None  # the settlement reached the origin
    now[0] = 10_000.0
    assert one.sweep() == 0 and two.sweep() == 0
    rows = counts_by_code(merge([one.rows(), two.rows()]))
    assert rows["BAD"]["failures"] == 1 and rows["BAD"]["recovered"] == 1
    assert rows["BAD"]["abandoned"] == 0


def test_readings_name_the_largest_problem() -> None:
    row = {"code": "CSV_MALFORMED", "failures": 100, "retried_unchanged": 72}
    assert reading(row).startswith("72 % of callers retried CSV_MALFORMED unchanged")
    assert "before retry_after_ms" in reading({"code": "X", "failures": 4, "retried_too_early": 1})
    assert "gave up" in reading({"code": "X", "failures": 2, "abandoned": 2})


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (
            {"code": "X", "failures": 3, "open": 3},
            "all 3 X failure(s) are still within the window: no outcome yet",
        ),
        (
            {"code": "X", "failures": 4, "open": 2, "recovered": 1, "abandoned": 1},
            "50 % of callers gave up after X: no recovery path is being found "
            "(2 more still within the window)",
        ),
        (
            {"code": "X", "failures": 4, "open": 2, "recovered": 2},
            "100 % of X failures were recovered (2 more still within the window)",
        ),
        (
            {"code": "X", "failures": 2, "retried_unchanged": 2, "with_fix_required": 2},
            "100 % of callers retried X unchanged: its fix_required is not being acted on "
            "(or it should be retryable)",
        ),
        (
            {"code": "X", "failures": 2, "retried_unchanged": 2, "with_fix_required": 0},
            "100 % of callers retried X unchanged, which names no fix_required to act on: "
            "give its rule one (or make it retryable, if it is transient)",
        ),
        (
            {"code": "X", "failures": 2, "retried_unchanged": 1, "abandoned": 1},
            "50 % of callers retried X unchanged, though it is not retryable: check that its "
            "advice reaches them",
        ),
    ],
    ids=["all-open", "shares-of-settled", "recovered", "with-fix", "no-fix", "unknown-fix"],
)
def test_readings_apply_only_where_they_can(row: dict[str, Any], expected: str) -> None:
    assert reading(row) == expected


def test_rows_say_what_is_open_and_merge_it_once() -> None:
    now = [0.0]
    settings = FollowupsSpec(window_s=10)
    one = FollowupBook(settings, clock=lambda: now[0], origin=1)
    two = FollowupBook(settings, clock=lambda: now[0], origin=2)
    one.publish, two.publish = two.apply, one.apply  # siblings, as under --workers
    failed = Answered(400, "BAD", "r", fix_required=True)
    one.settle(Attempt("a", "a", "api", 0.0), failed, "first", None)
    two.settle(Attempt("b", "b", "api", 0.0), Answered(400, "BAD", "r"), "second", None)
    (merged,) = merge([one.rows(), two.rows()])
    assert (merged["failures"], merged["open"], merged["with_fix_required"]) == (2, 2, 1)
    settled = two.settle(Attempt("a", "x", "api", 1.0), Answered(200), "third", two.pending("a"))
    assert settled is not None and settled.outcome is Outcome.RECOVERED
    (after,) = merge([one.rows(), two.rows()])
    assert (after["open"], after["recovered"]) == (1, 1)
    # A row with no `open` (the fleet store's) gets the failures not settled yet.
    fleet = {"route": "api", "code": "BAD", "rule": "r", "failures": 5, "abandoned": 2}
    assert merge([[fleet]])[0]["open"] == 3


async def test_the_cli_prints_the_table_and_a_reading_per_code(
    start_gateway: StartGateway,
    start_upstream: StartUpstream,
    capsys: pytest.CaptureFixture[str],
) -> None:
    upstream = await start_upstream(orders_app())
    gateway = await start_gateway(route_config(upstream, name="cli"), admin="127.0.0.1:0")
    for _ in range(3):
        await gateway.request("POST", "/orders", json={"qty": -1})
    assert gateway.server.admin_address is not None
    host, port = gateway.server.admin_address
    code = await asyncio.to_thread(main, ["followups", "--admin", f"{host}:{port}"])
    out = capsys.readouterr().out
    assert code == 0
    line = next(line for line in out.splitlines() if line.startswith("cli "))
    assert line.split()[1:5] == ["BAD_REQUEST", "3", "1", "0"]  # 1 of 3 open, none abandoned
    assert "100 % of callers retried BAD_REQUEST unchanged: its fix_required" in out
    assert "(1 more still within the window)" in out


def test_the_cli_says_when_it_cannot_reach_the_admin(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["followups", "--admin", f"127.0.0.1:{free_port()}"]) != 0
    assert "cannot read" in capsys.readouterr().err


def locked_app() -> web.Application:
    """`/orders/1` answers 409 until `/unlock`; `/other` answers 400."""
    state = {"locked": True}

    async def order(request: web.Request) -> web.Response:
        if state["locked"]:
            return web.json_response({"message": "the order is locked"}, status=409)
        return web.json_response({"id": 1})

    async def other(request: web.Request) -> web.Response:
        return web.json_response({"message": "bad"}, status=400)

    app = web.Application()
    app.router.add_get("/orders/1", order)
    app.router.add_get("/other", other)
    return app


async def test_the_readings_of_a_running_gateway_apply_where_they_can(
    start_upstream: StartUpstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream = await start_upstream(locked_app())
    port, admin = free_port(), free_port()
    config = {
        "listen": f"127.0.0.1:{port}",
        "admin": f"127.0.0.1:{admin}",
        "routes": [{"name": "shop", "upstream": upstream}],
        "followups": {"window_s": 60},
        "rules": [  # a code whose failures carry no fix_required
            {
                "id": "order-locked",
                "match": {"status": [409]},
                "error": {"code": "ORDER_LOCKED", "category": "CONFLICT"},
            }
        ],
    }
    path = write_config(tmp_path, config)
    process = await start_process("serve", "--config", str(path))
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(session, f"http://127.0.0.1:{admin}/readyz", process)
            for _ in range(3):  # the same request again: retried unchanged, twice
                async with session.get(f"http://127.0.0.1:{port}/orders/1") as response:
                    assert response.status == 409
            async with session.get(f"http://127.0.0.1:{port}/other") as response:
                assert response.status == 400  # one failure, still inside its window
            async with session.get(f"http://127.0.0.1:{admin}/followups") as response:
                rows = {row["code"]: row for row in (await response.json())["codes"]}
        argv = ["followups", "--admin", f"127.0.0.1:{admin}"]
        assert await asyncio.to_thread(main, argv) == 0
        out = capsys.readouterr().out
    finally:
        code, stderr = await stop_process(process)
    assert code == 0, stderr
    assert "fix_required is not being acted on" not in out
    assert "% of BAD_REQUEST failures were recovered" not in out
    assert "retried ORDER_LOCKED unchanged, which names no fix_required to act on" in out
    assert "all 1 BAD_REQUEST failure(s) are still within the window" in out
    locked, bad = rows["ORDER_LOCKED"], rows["BAD_REQUEST"]
    assert (locked["failures"], locked["open"], locked["with_fix_required"]) == (3, 1, 0)
    assert (bad["failures"], bad["open"], bad["with_fix_required"]) == (1, 1, 1)
