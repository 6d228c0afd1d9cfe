"""Per-route TLS towards an `https` upstream (and the same block for an `https` remote
resolver, `resolver.tls`): the files it names, and the SSL context.

A route's `tls:` block (docs/configuration.md#upstream-tls) may name a CA file to trust
instead of the system store, a client certificate and key (mTLS), the server name to send and
verify, or switch verification off (`insecure: true`, warned about at start). Relative paths
are resolved against the config file's directory at load time, and every file is loaded then,
so a missing or malformed file is a config error with file and line, never a failure of the
first request.
"""

from __future__ import annotations

import os
import ssl

from gateway.config.errors import Problem
from gateway.config.models import GatewayConfig
from gateway.config.route_model import TlsSpec
from gateway.config.yamlsrc import YamlDoc


def tls_context(spec: TlsSpec | None) -> ssl.SSLContext:
    """The client-side SSL context for a route: the system trust store unless told otherwise.

    Raises `ssl.SSLError` or `OSError` for files that cannot be loaded.
    """
    if spec is not None and spec.insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = ssl.create_default_context(cafile=spec.ca_file if spec else None)
    if spec is not None and spec.cert_file is not None:
        context.load_cert_chain(spec.cert_file, spec.key_file)
    return context


def resolve_route_tls(
    config: GatewayConfig, doc: YamlDoc, base_dir: str
) -> tuple[GatewayConfig, list[Problem]]:
    """Make the routes' TLS file paths absolute and prove each one loads."""
    problems: list[Problem] = []
    routes = list(config.routes)
    changed = False
    for index, route in enumerate(routes):
        if route.tls is None:
            continue
        spec = _with_absolute_paths(route.tls, base_dir)
        try:
            tls_context(spec)
        except (ssl.SSLError, OSError) as exc:
            line = doc.line_of(("routes", index, "tls"))
            problems.append(Problem(doc.file, line, f"routes[{index}].tls", _reason(exc)))
            continue
        routes[index] = route.model_copy(update={"tls": spec})
        changed = True
    if changed:
        config = config.model_copy(update={"routes": routes})
    return config, problems


def resolve_resolver_tls(
    spec: TlsSpec, doc: YamlDoc, base_dir: str
) -> tuple[ssl.SSLContext | None, list[str], list[Problem]]:
    """`resolver.tls` as a route's `tls`: the SSL context, the files it read, its problems."""
    spec = _with_absolute_paths(spec, base_dir)
    files = [path for path in (spec.ca_file, spec.cert_file, spec.key_file) if path is not None]
    try:
        return tls_context(spec), files, []
    except (ssl.SSLError, OSError) as exc:
        line = doc.line_of(("resolver", "tls"))
        return None, files, [Problem(doc.file, line, "resolver.tls", _reason(exc))]


def resolve_block_tls(
    spec: TlsSpec, doc: YamlDoc, base_dir: str, where: tuple[str, ...]
) -> tuple[TlsSpec, list[Problem]]:
    """Another `tls:` block (`fleet.tls`): its paths made absolute, each file proven to load."""
    spec = _with_absolute_paths(spec, base_dir)
    try:
        tls_context(spec)
    except (ssl.SSLError, OSError) as exc:
        return spec, [Problem(doc.file, doc.line_of(where), ".".join(where), _reason(exc))]
    return spec, []


def _with_absolute_paths(spec: TlsSpec, base_dir: str) -> TlsSpec:
    return spec.model_copy(
        update={
            key: _absolute(value, base_dir)
            for key in ("ca_file", "cert_file", "key_file")
            if (value := getattr(spec, key)) is not None
        }
    )


def _absolute(path: str, base_dir: str) -> str:
    return path if os.path.isabs(path) else os.path.normpath(os.path.join(base_dir, path))


def _reason(exc: ssl.SSLError | OSError) -> str:
    if isinstance(exc, ssl.SSLError):
        return f"cannot load the certificate or key: {exc.reason or exc}"
    name = f" ({exc.filename})" if exc.filename else ""
    return f"cannot read a TLS file{name}: {exc.strerror or exc}"
