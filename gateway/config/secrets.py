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

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl

TOKEN_ENV = "MENDPOINT_RESOLVER_TOKEN_FILE"
ADMIN_TOKEN_ENV = "MENDPOINT_ADMIN_TOKEN_FILE"
"""The admin listener's token file (`admin_token_file`), read the same way
(docs/security.md#admin-authentication)."""
MIN_TOKEN_CHARS = 16
MAX_TOKEN_FILE_BYTES = 64 * 1024


class TokenError(ValueError):
    """The token file cannot be read or holds no usable token (the message names no token)."""


def read_tokens(path: str) -> tuple[str, ...]:
    """The non-empty lines of `path`, each a token of visible ASCII of at least 16 characters."""
    try:
        with open(path, "rb") as handle:
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
