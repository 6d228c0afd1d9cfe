"""An OTLP/HTTP trace collector for the tracing row: takes each export and answers as a
collector does (an empty `ExportTraceServiceResponse` is zero bytes), counting what it got.

`python -m bench.otlp_sink PORT`; pinned to the load core by `bench.upstream.OtlpSink`, so
what the gateway pays for tracing is measured on its own core. It does not decode the spans:
the tests' receiver does (tests/support/otlp.py); here only the gateway's cost matters.
"""

from __future__ import annotations

import sys

from aiohttp import web

PROTOBUF = "application/x-protobuf"


def app() -> web.Application:
    counts = {"exports": 0, "bytes": 0}

    async def export(request: web.Request) -> web.Response:
        counts["exports"] += 1
        counts["bytes"] += len(await request.read())
        return web.Response(body=b"", content_type=PROTOBUF)

    async def seen(_: web.Request) -> web.Response:
        return web.json_response(counts)

    application = web.Application()
    application.router.add_post("/v1/traces", export)
    application.router.add_get("/seen", seen)
    return application


if __name__ == "__main__":
    web.run_app(app(), host="127.0.0.1", port=int(sys.argv[1]), print=None)
