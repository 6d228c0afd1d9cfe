"""Relaying an upstream body to the client as it arrives, never buffering it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from aiohttp import HttpVersion11, StreamReader, hdrs, web
from multidict import CIMultiDict, CIMultiDictProxy

from gateway.proxy.aiohttp_private import RelayResponse
from gateway.proxy.client import UpstreamResponse
from gateway.proxy.headers import client_response_headers
from gateway.proxy.upstream import UPSTREAM_ERRORS

log = logging.getLogger("mendpoint.proxy")


class RewrittenResponse(RelayResponse, web.Response):
    """A rewritten error body: whole in memory, but with no Content-Type the upstream did not
    send either (an `additive` body keeps the upstream's type, or its lack of one)."""


async def relay(
    request: web.Request,
    upstream: UpstreamResponse,
    headers: CIMultiDict[str],
    already_read: bytes = b"",
    *,
    complete: bool = False,
) -> web.StreamResponse:
    """Send `already_read`, then (unless `complete`) the rest of the upstream body.

    If the upstream fails mid-body the client connection is aborted: with the status line
    already sent, a cleanly ended short body would be mistaken for a complete one.
    """
    response = RelayResponse(status=upstream.status, reason=upstream.reason, headers=headers)
    await response.prepare(request)
    try:
        if already_read:
            await response.write(already_read)
        if not complete:
            async for chunk in _chunks(upstream.content):
                await response.write(chunk)
    except UPSTREAM_ERRORS as exc:
        log.warning(
            "upstream failed mid-body (%s); aborting the client connection", type(exc).__name__
        )
        if request.transport is not None:
            request.transport.abort()
        return response
    await response.write_eof()
    return response


async def send_continue(request: web.Request) -> None:
    """Tell the client to send the body it holds back (`Expect: 100-continue`)."""
    await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    request.writer.output_size = 0  # the interim answer is not part of the response's size


async def relay_interim(
    request: web.Request, status: int, reason: str, headers: CIMultiDictProxy[str]
) -> None:
    """Pass an upstream's interim answer on, before the final one: a 100 Continue when the
    client asked for one, a 103 Early Hints (with its Link headers) to any HTTP/1.1 client."""
    if request.version < HttpVersion11 or request.writer.output_size:
        return
    if status == 100:
        if request.headers.get(hdrs.EXPECT, "").lower() == "100-continue":
            await send_continue(request)
        return
    fields = client_response_headers(headers)
    head = f"HTTP/1.1 {status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    await request.writer.write(head.encode("latin-1", "replace") + b"\r\n")
    request.writer.output_size = 0


async def _chunks(content: StreamReader) -> AsyncIterator[bytes]:
    """Each buffered chunk as received, without joining the buffer (as `iter_any` does).

    Not `iter_chunks()`: aiohttp's shared empty payload (HEAD, 204, 304, bodiless answers)
    ends that iterator only the first time it is used in a process and then yields
    `(b"", True)` forever, a busy loop. End of body is asked of the stream instead.
    """
    while True:
        chunk, _ = await content.readchunk()
        if chunk:
            yield chunk
        elif content.at_eof():
            return
