"""The resolver's credentials: the shared token, and the server side of its (mutual) TLS
(docs/security.md#resolver-authentication). The gateway's side is `resolver.tls`, the same
block a route has (gateway.config.tls).

The gateway presents the token to `mendpoint resolver`, which accepts it. Both read it from a
file (a Kubernetes Secret mounted read-only, say), never from the config or the command line,
where it would end up in `ps`, shell history or a ConfigMap. A file may hold several tokens,
one per line: the resolver accepts any of them and the gateway sends the first, so a token
can be rotated without a window of refusals. Messages about a token never quote it.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl

log = logging.getLogger("mendpoint.config")

TOKEN_ENV = "MENDPOINT_RESOLVER_TOKEN_FILE"
ADMIN_TOKEN_ENV = "MENDPOINT_ADMIN_TOKEN_FILE"
"""The admin listener's token file (`admin_token_file`), read the same way
(docs/security.md#admin-authentication)."""
MIN_TOKEN_CHARS = 16
MAX_TOKEN_FILE_BYTES = 64 * 1024


class TokenError(ValueError):
    """The token file cannot be read or holds no usable token (the message names no token)."""


def read_tokens(path: str) -> tuple[str, ...]:
    """The non-empty lines of `path`, each a token of visible ASCII of at least 16 characters,
    from a file no other user can read (`private_enough`)."""
    try:
        with open(path, "rb") as handle:
            private_enough(path, os.fstat(handle.fileno()))
            raw = handle.read(MAX_TOKEN_FILE_BYTES + 1)
    except OSError as exc:
        raise TokenError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_TOKEN_FILE_BYTES:
        raise TokenError(f"{path} is larger than {MAX_TOKEN_FILE_BYTES} bytes")
    tokens = []
    for number, line in enumerate(raw.splitlines(), start=1):
        token = line.strip()
        if not token:
            continue
        if not all(0x21 <= byte <= 0x7E for byte in token):
            raise TokenError(
                f"{path}:{number}: a token may hold only visible ASCII characters (it is sent "
                f"in an Authorization header)"
            )
        if len(token) < MIN_TOKEN_CHARS:
            raise TokenError(
                f"{path}:{number}: the token has {len(token)} characters; use at least "
                f"{MIN_TOKEN_CHARS} (for example the output of `openssl rand -hex 32`)"
            )
        tokens.append(token.decode("ascii"))
    if not tokens:
        raise TokenError(f"{path} holds no token")
    return tuple(tokens)


def private_enough(path: str, status: os.stat_result) -> None:
    """A secret file every user can read is refused, as ssh refuses such a key: the fix is
    `chmod 600`, or `defaultMode: 0400` (0440 with `fsGroup`) for a Kubernetes Secret, whose
    default 0644 is readable by every user of the node's container. Readable by its group is
    accepted when this process is in that group (Kubernetes' `fsGroup` mounts a Secret 0440
    for the pod's own group), and said loudly otherwise (docs/security.md#secret-files)."""
    mode = stat.S_IMODE(status.st_mode)
    if mode & stat.S_IROTH:
        raise TokenError(
            f"{path} is readable by every user (mode {mode:04o}): chmod 600 {path}, or mount "
            "its Kubernetes Secret with defaultMode: 0400 (0440 with fsGroup)"
        )
    if mode & stat.S_IRGRP and status.st_gid not in {os.getegid(), *os.getgroups()}:
        log.warning(
            "%s is readable by group %d, which this process is not in (mode %04o): chmod 600 %s",
            path,
            status.st_gid,
            mode,
            path,
        )


class TlsError(ValueError):
    """A certificate, key or CA file that cannot be loaded."""


def _loaded(what: str, load: Callable[[], None]) -> None:
    try:
        load()
    except OSError as exc:  # ssl.SSLError is one
        reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or exc
        raise TlsError(f"cannot load {what}: {reason}") from None


def server_tls(cert_file: str, key_file: str, client_ca: str | None) -> ssl.SSLContext:
    """The resolver's side: serve `cert_file`; with `client_ca`, require a client certificate
    that it signed (mutual TLS)."""
    import ssl  # here: the command line imports this module, and most commands serve no TLS

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    _loaded(
        f"--tls-cert/--tls-key {cert_file}", lambda: context.load_cert_chain(cert_file, key_file)
    )
    if client_ca is not None:
        _loaded(
            f"--tls-client-ca {client_ca}", lambda: context.load_verify_locations(cafile=client_ca)
        )
        context.verify_mode = ssl.CERT_REQUIRED
    return context
