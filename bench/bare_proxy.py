"""The baseline: a bare aiohttp reverse proxy, the least a Python gateway can do per request.

One shared ClientSession, headers copied minus hop-by-hop ones, the body streamed through
as it arrives, uvloop when asked. No classification, no access log unless `--access-log`
(which measures what aiohttp's own logger costs). Mendpoint's ratios are taken against this.

`--buffer-small` is the second baseline (`bare-buffered`): a success whose Content-Length
says at most SMALL_BODY bytes is read whole and answered with `web.Response`, status line,
headers and body in one write; anything else still streams.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import logging
import sys
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from multidict import CIMultiDictProxy
from yarl import URL

HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding"}
    | {"upgrade", "host", "proxy-authorization", "proxy-authenticate"}
)
SESSION = web.AppKey("session", aiohttp.ClientSession)
UPSTREAM = web.AppKey("upstream", str)
BUFFER_SMALL = web.AppKey("buffer_small", bool)
SMALL_BODY = 64 * 1024  # the same bound as Mendpoint's one-write path (gateway/exchange/relay.py)


def end_to_end(headers: CIMultiDictProxy[str]) -> list[tuple[str, str]]:
    """The headers worth forwarding: everything but hop-by-hop ones (and Host)."""
    return [(k, v) for k, v in headers.items() if k.lower() not in HOP_BY_HOP]


async def handle(request: web.Request) -> web.StreamResponse:
    """Forward once, then stream status, headers and body back as they come."""
    url = URL(request.app[UPSTREAM] + request.raw_path, encoded=True)
    body = request.content if request.body_exists else None
    try:
        async with request.app[SESSION].request(
            request.method,
            url,
            headers=end_to_end(request.headers),
            data=body,
            allow_redirects=False,
        ) as upstream:
            if request.app[BUFFER_SMALL] and _small(request, upstream):
                return web.Response(
                    status=upstream.status,
                    reason=upstream.reason,
                    headers=end_to_end(upstream.headers),
                    body=await upstream.read(),
                )
            response = web.StreamResponse(
                status=upstream.status,
                reason=upstream.reason,
                headers=end_to_end(upstream.headers),
            )
            await response.prepare(request)
            async for chunk, _ in upstream.content.iter_chunks():
                await response.write(chunk)
            await response.write_eof()
            return response
    except (aiohttp.ClientError, OSError):
        return web.Response(status=502, text="Bad Gateway\n")


def _small(request: web.Request, upstream: aiohttp.ClientResponse) -> bool:
    length = upstream.content_length
    return length is not None and length <= SMALL_BODY and request.method != "HEAD"


async def session_ctx(app: web.Application) -> AsyncIterator[None]:
    connector = aiohttp.TCPConnector(limit=256)
    app[SESSION] = aiohttp.ClientSession(connector=connector, auto_decompress=False)
    yield
    await app[SESSION].close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port", type=int, required=True)
    # "auto" is what the gateway does (gateway/serve/process_tuning.py): uvloop when installed,
    # so the two are compared on the same loop whether or not bench/setup.sh has run.
    parser.add_argument("--loop", choices=["auto", "uvloop", "asyncio"], default="auto")
    parser.add_argument("--access-log", action="store_true")
    parser.add_argument(
        "--buffer-small", action="store_true", help="answer small known-length bodies whole"
    )
    args = parser.parse_args()
    if args.loop == "uvloop" or (args.loop == "auto" and importlib.util.find_spec("uvloop")):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    app = web.Application()
    app[UPSTREAM] = args.upstream.rstrip("/")
    app[BUFFER_SMALL] = args.buffer_small
    app.cleanup_ctx.append(session_ctx)
    app.router.add_route("*", "/{tail:.*}", handle)
    if args.access_log:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    access_log = logging.getLogger("aiohttp.access") if args.access_log else None
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=access_log, print=None)


if __name__ == "__main__":
    main()
