"""A legacy API of the kind the retrofit loop is for (docs/operations.md#the-rollout-loop):
each of its errors in a shape of its own, none of them a framework's, so only the shipped
fallbacks name them until rules are written. Served by the tests as a real aiohttp app.

| request                       | answer                                                   |
| ----------------------------- | -------------------------------------------------------- |
| GET /accounts/me              | 401, JSON `message`, `WWW-Authenticate: Bearer`          |
| GET /accounts/{id}            | 404, legacy `{"errorCode": "E1004", "errorMessage": …}`  |
| POST /accounts                | 409, JSON `errMsg` (a key no default path reads)         |
| POST /transfers               | 422, JSON `errors[*].message`                            |
| GET /rates                    | 429, plain text, `Retry-After: 7`                        |
| GET /reports/{id}             | 500, an HTML error page                                  |
| GET /status                   | 503, plain text                                          |
| GET /audit                    | 403, an XML body                                         |
| GET /health                   | 200                                                      |
"""

from __future__ import annotations

from aiohttp import web

HTML_500 = (
    "<!DOCTYPE html><html><head><title>500 Internal Server Error</title></head><body>"
    "<h1>Internal Server Error</h1><p>The ledger backend did not answer report {id}.</p>"
    "<hr><address>legacy-app/2.3</address></body></html>"
)
XML_403 = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<error><code>AUDIT_FORBIDDEN</code>'
    "<message>The audit log needs the auditor role</message></error>"
)


def legacy_app() -> web.Application:
    async def me(request: web.Request) -> web.Response:
        body = {"message": "Missing or invalid API key"}
        return web.json_response(body, status=401, headers={"WWW-Authenticate": "Bearer"})

    async def account(request: web.Request) -> web.Response:
        number = request.match_info["id"]
        body = {"errorCode": "E1004", "errorMessage": f"Account {number} does not exist"}
        return web.json_response(body, status=404)

    async def create_account(request: web.Request) -> web.Response:
        body = {"errMsg": "An account with this email already exists."}
        return web.json_response(body, status=409)

    async def transfer(request: web.Request) -> web.Response:
        body = {"errors": [{"field": "amount", "message": "amount must be positive"}]}
        return web.json_response(body, status=422)

    async def rates(request: web.Request) -> web.Response:
        return web.Response(text="Too many requests", status=429, headers={"Retry-After": "7"})

    async def report(request: web.Request) -> web.Response:
        page = HTML_500.format(id=request.match_info["id"])
        return web.Response(text=page, status=500, content_type="text/html")

    async def status(request: web.Request) -> web.Response:
        return web.Response(text="Service temporarily unavailable: maintenance", status=503)

    async def audit(request: web.Request) -> web.Response:
        return web.Response(text=XML_403, status=403, content_type="application/xml")

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/accounts/me", me)
    app.router.add_get("/accounts/{id}", account)
    app.router.add_post("/accounts", create_account)
    app.router.add_post("/transfers", transfer)
    app.router.add_get("/rates", rates)
    app.router.add_get("/reports/{id}", report)
    app.router.add_get("/status", status)
    app.router.add_get("/audit", audit)
    app.router.add_get("/health", health)
    return app
