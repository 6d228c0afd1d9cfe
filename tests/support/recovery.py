"""A failing upstream and the rule that gives its failure a recovery intent, for the tests of
who may see which options (trusted callers, resolver authentication, the resolver contract)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

CSV_RULE: dict[str, Any] = {
    "id": "csv",
    "match": {"status": [400]},
    "error": {
        "code": "CSV_MALFORMED",
        "category": "VALIDATION_ERROR",
        "fix_required": "Fix the rows",
        "recovery_intent": "format_inspection",
    },
}


def csv_failing_upstream() -> web.Application:
    """Answers every request 400 with a CSV error that `CSV_RULE` classifies."""

    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"error": "Row at line 2 has 4 columns"}, status=400)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return app
