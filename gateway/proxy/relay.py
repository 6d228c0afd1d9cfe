"""Relaying an upstream body to the client as it arrives, never buffering it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from aiohttp import StreamReader, web
from multidict import CIMultiDict

from gateway.proxy.aiohttp_private import RelayResponse
from gateway.proxy.client import UpstreamResponse
from gateway.proxy.upstream import UPSTREAM_ERRORS

log = logging.getLogger("mendpoint.proxy")


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
