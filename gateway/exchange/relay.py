"""Relaying an upstream body to the client as it arrives, never buffering it.

One shortcut: a small body that has already arrived whole with its head (nginx and most
servers send a short answer in one segment) is answered in one call, head and body in one
write instead of two, without the chunk loop. It holds nothing that streaming would not
hold: the bytes are in the upstream stream's buffer either way. A body the failure path read
whole is sent the same way.
"""

from __future__ import annotations

import contextlib
import logging

from aiohttp import HttpVersion11, hdrs, web
from multidict import CIMultiDict, CIMultiDictProxy

from gateway.exchange.headers import client_response_headers
from gateway.exchange.upstream.round_trip import UpstreamResponse
from gateway.fence.aiohttp_private import OneWriteResponse, RelayResponse

log = logging.getLogger("mendpoint.proxy")

SMALL_BODY = 64 * 1024
"""The largest body `arrived_whole` answers in one write. The chunks it joins are copied; up
to aiohttp's own write-drain limit (64 KiB, also the upstream read buffer: READ_CHUNK) that
copy costs less than the loop it saves, and a larger answer streams as before."""
# No body by definition, whatever Content-Length says (it describes the representation).
BODILESS_STATUSES = frozenset({204, 304})


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

    A `complete` body, or a small one that `arrived_whole`, goes out with its head in one
    write. Otherwise the head goes at once and the body follows as it arrives; if the
    upstream fails mid-body the client connection is aborted: with the status line already
    sent, a cleanly ended short body would be mistaken for a complete one.
    """
    if complete:
        whole: bytes | None = already_read
    else:
        whole = None if already_read else arrived_whole(request.method, upstream)
    if whole is not None:
        answer = OneWriteResponse(status=upstream.status, reason=upstream.reason, headers=headers)
        await answer.prepare(request)  # the head waits in the writer for the body
        # A client that left is no one's failure: aiohttp ignores it too for any answer.
        with contextlib.suppress(ConnectionError):
            await answer.write_eof(whole)
        return answer
    response = RelayResponse(status=upstream.status, reason=upstream.reason, headers=headers)
    await response.prepare(request)
    try:
        if already_read:
            await response.write(already_read)
        async for chunk in upstream.chunks():
            await response.write(chunk)
    except ConnectionError:  # the client left: no one's failure, as for any answer
        if request.transport is not None:
            request.transport.abort()
        return response
    if upstream.fault is not None:
        log.warning(
            "upstream failed mid-body (%s); aborting the client connection", upstream.fault.value
        )
        if request.transport is not None:
            request.transport.abort()
        return response
    await response.write_eof()
    return response


def arrived_whole(method: str, upstream: UpstreamResponse) -> bytes | None:
    """The body, if it is at most SMALL_BODY bytes by its Content-Length and has already
    arrived whole and sound; else None, and it streams.

    Never for HEAD or a 204/304 (no body whatever the length says), a chunked or close-framed
    body (no length), nor a body still arriving: waiting for it would hold back bytes that
    streaming passes on at once.
    """
    length = upstream.content_length
    if length is None or length > SMALL_BODY:
        return None
    if method == "HEAD" or upstream.status in BODILESS_STATUSES:
        return None
    content = upstream.content
    if not content.is_eof() or content.exception() is not None or content.total_bytes != length:
        return None
    return content.read_nowait()


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
