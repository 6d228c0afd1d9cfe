"""Reading the shared resolver token from a file (docs/security.md#resolver-authentication).

The gateway presents the token to `mendpoint resolver`, which accepts it. Both read it from a
file (a Kubernetes Secret mounted read-only, say), never from the config or the command line,
where it would end up in `ps`, shell history or a ConfigMap. A file may hold several tokens,
one per line: the resolver accepts any of them and the gateway sends the first, so a token
can be rotated without a window of refusals. Messages about a token never quote it.
"""

from __future__ import annotations

TOKEN_ENV = "MENDPOINT_RESOLVER_TOKEN_FILE"
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
