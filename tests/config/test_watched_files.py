"""The files a config names, each watched for a reload: those of a load that failed too
(`ConfigError.files`), every token and key file, and the record `GET /config` answers
(gateway.config.watch.ConfigRecord); the fleet's secrets stay as they run until restart."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config.errors import ConfigError
from gateway.config.loader import load_config
from gateway.config.watch import ConfigRecord, reloaded_config
from tests.support.secrets import write_secret

TOKEN = "a-token-of-sixteen-or-more"
KEY = "k" * 40


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def base(**extra: Any) -> dict[str, Any]:
    return {"routes": [{"name": "api", "upstream": "http://127.0.0.1:9"}], **extra}


@pytest.mark.parametrize(
    "pack",
    [None, "rules: [\n", "rules: [{id: x}]\n"],
    ids=["missing", "not-yaml", "fails-its-model"],
)
def test_a_load_that_fails_names_every_file_it_tried(tmp_path: Path, pack: str | None) -> None:
    (tmp_path / "good.yaml").write_text("rules: []\n")
    if pack is not None:
        (tmp_path / "bad.yaml").write_text(pack)
    path = write(tmp_path / "gateway.yaml", base(include=["good.yaml", "bad.yaml"]))
    with pytest.raises(ConfigError) as raised:
        load_config(str(path))
    named = (path, tmp_path / "good.yaml", tmp_path / "bad.yaml")
    assert raised.value.files == tuple(str(p) for p in named)


def test_a_config_that_cannot_be_read_names_itself(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("routes: [\n")
    with pytest.raises(ConfigError) as raised:
        load_config(str(path))
    assert raised.value.files == (str(path),)


def test_every_token_and_key_file_is_watched(tmp_path: Path) -> None:
    for name in ("resolver.token", "admin.token", "redis.password"):
        write_secret(tmp_path / name, TOKEN + "\n")
    write_secret(tmp_path / "session.keys", KEY + "\n")
    keys = {"keys": [{"name": "a", "key": "sha256:" + "0" * 64}]}
    write(tmp_path / "keys.yaml", keys)
    data = base(
        admin_token_file="admin.token",
        callers={"source": "api_key", "keys_file": "keys.yaml"},
        resolver={"url": "http://127.0.0.1:9", "token_file": "resolver.token"},
        fleet={
            "redis": "redis://127.0.0.1:9/0",
            "password_file": "redis.password",
            "sessions": {"key_file": "session.keys", "listen": "127.0.0.1:0"},
        },
    )
    loaded = load_config(str(write(tmp_path / "gateway.yaml", data)))
    named = ("keys.yaml", "resolver.token", "admin.token", "redis.password", "session.keys")
    assert set(loaded.files) == {str(tmp_path / "gateway.yaml")} | {
        str(tmp_path / name) for name in named
    }


def test_the_fleets_secrets_take_effect_on_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_secret(tmp_path / "redis.password", TOKEN + "\n")
    write_secret(tmp_path / "session.keys", KEY + "\n")
    fleet = {
        "redis": "redis://127.0.0.1:9/0",
        "password_file": "redis.password",
        "sessions": {"key_file": "session.keys", "listen": "127.0.0.1:0"},
    }
    path = write(tmp_path / "gateway.yaml", base(fleet=fleet))
    running = load_config(str(path))
    write_secret(tmp_path / "redis.password", "another-password-of-16\n")
    write_secret(tmp_path / "session.keys", "m" * 40 + "\n" + KEY + "\n")
    with caplog.at_level(logging.WARNING, logger="mendpoint.reload"):
        reloaded = reloaded_config(str(path), running)
    assert reloaded.fleet_password == running.fleet_password == TOKEN
    assert reloaded.session_keys == running.session_keys
    said = caplog.text
    assert "fleet.password_file changed; it takes effect on restart" in said
    assert "fleet.sessions.key_file changed; it takes effect on restart" in said
    assert TOKEN not in said and KEY not in said


def test_the_record_watches_what_runs_and_what_the_failed_reload_named(tmp_path: Path) -> None:
    now = [1_000_000.25]
    (tmp_path / "first.yaml").write_text("rules: []\n")
    path = write(tmp_path / "gateway.yaml", base(include=["first.yaml"]))
    record = ConfigRecord(load_config(str(path)), clock=lambda: now[0])
    running = [str(path), str(tmp_path / "first.yaml")]
    assert record.files() == running
    assert record.to_json() == {
        "generation": 1,
        "loaded_at": "1970-01-12T13:46:40.250Z",
        "files": running,
        "last_error": None,
    }
    write(path, base(include=["second.yaml"]))
    now[0] += 60
    with pytest.raises(ConfigError) as raised:
        load_config(str(path))
    record.failed(raised.value)
    assert record.files() == [*running, str(tmp_path / "second.yaml")]  # both, until it works
    status = record.to_json()
    assert status["generation"] == 1 and status["loaded_at"] == "1970-01-12T13:46:40.250Z"
    assert status["last_error"]["at"] == "1970-01-12T13:47:40.250Z"
    assert "second.yaml" in status["last_error"]["message"]
    (tmp_path / "second.yaml").write_text("rules: []\n")
    now[0] += 1
    record.loaded(load_config(str(path)))
    assert record.files() == [str(path), str(tmp_path / "second.yaml")]
    assert record.to_json()["generation"] == 2 and record.last_error is None
