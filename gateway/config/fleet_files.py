"""The files a config's `fleet:` block names, read at load: the store's password, the keys
that sign what replicas share (`fleet.key_file`) and bridge session ids
(`fleet.sessions.key_file`), and TLS files. Read now so a missing or bad file is a config
error, not a store that never connects; all of them are watched, and a reload after one
changed says it takes effect on restart (gateway/config/watch.py).
"""

from __future__ import annotations

import importlib.util
import os

from gateway.config.errors import Problem
from gateway.config.loaded import LoadedConfig
from gateway.config.secrets import TokenError, read_tokens
from gateway.config.session_keys import SessionKeys, read_session_keys
from gateway.config.tls import resolve_block_tls
from gateway.config.yamlsrc import YamlDoc


def add_fleet_files(loaded: LoadedConfig, doc: YamlDoc, base_dir: str) -> list[Problem]:
    """Read the `fleet:` block's files into `loaded`; the problems, each at its key's line."""
    spec = loaded.config.fleet
    if spec is None:
        return []
    problems: list[Problem] = []
    if importlib.util.find_spec("redis") is None:
        message = "needs the redis package: pip install 'mendpoint[fleet]'"
        problems.append(Problem(doc.file, doc.line_of(("fleet", "redis")), "fleet.redis", message))

    def read(where: tuple[str, ...], name: str) -> SessionKeys | str | None:
        path = os.path.normpath(os.path.join(base_dir, name))  # an absolute path: itself
        loaded.files.append(os.path.abspath(path))
        try:
            return (
                read_tokens(path)[0]
                if where == ("fleet", "password_file")
                else read_session_keys(path)
            )
        except TokenError as exc:
            problems.append(Problem(doc.file, doc.line_of(where), ".".join(where), str(exc)))
            return None

    if spec.password_file is not None:
        password = read(("fleet", "password_file"), spec.password_file)
        loaded.fleet_password = password if isinstance(password, str) else None
    if spec.sessions is not None:
        keys = read(("fleet", "sessions", "key_file"), spec.sessions.key_file)
        loaded.session_keys = keys if isinstance(keys, SessionKeys) else None
    loaded.fleet_keys = loaded.session_keys
    if spec.key_file is not None:
        keys = read(("fleet", "key_file"), spec.key_file)
        loaded.fleet_keys = keys if isinstance(keys, SessionKeys) else None
    if spec.tls is not None:
        tls, tls_problems = resolve_block_tls(spec.tls, doc, base_dir, ("fleet", "tls"))
        problems.extend(tls_problems)
        fleet = spec.model_copy(update={"tls": tls})
        loaded.config = loaded.config.model_copy(update={"fleet": fleet})
    return problems
