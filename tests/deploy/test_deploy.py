"""deploy/ is checked without a container engine: manifests against the Kubernetes schemas
(offline, kubernetes-validate), every command line against the real CLI parser, every embedded
config through the real loader, and every PromQL metric against what the gateway exports."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from examples.fleet_demo import HAPROXY
from gateway.cli.parser import build_parser
from gateway.config.admin_address import DEFAULT_ADMIN
from gateway.config.loaded import LoadedConfig
from gateway.config.loader import load_catalog, load_config
from gateway.config.model_base import parse_host_port
from gateway.config.models import ShutdownSpec
from gateway.config.secrets import ADMIN_TOKEN_ENV, TOKEN_ENV, TokenError, read_tokens
from gateway.config.session_keys import MIN_KEY_CHARS
from gateway.serve.listeners import is_loopback
from gateway.telemetry.metrics import REGISTRY
from tests.support.fleet import program, wait_port
from tests.support.paths import DEPLOY
from tests.support.ports import free_port
from tests.support.secrets import write_secret

MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
K8S_VERSION = "1.30.0"
# What an operator puts in the resolver's Secret before deploying (docs/security.md).
OPERATOR_TOKEN = "3b9f0c2a7d6e5f4a1b8c9d0e2f3a4b5c"


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    if doc["kind"] != "Deployment":
        return []
    found: list[dict[str, Any]] = doc["spec"]["template"]["spec"]["containers"]
    return found


def parses(argv: list[str]) -> None:
    """The real `mendpoint` parser accepts these arguments (SystemExit would fail the test)."""
    build_parser().parse_args(argv)


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_manifests_validate_against_kubernetes_schemas(path: Path) -> None:
    docs = documents(path)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_expected_objects_exist() -> None:
    kinds = {(doc["kind"], doc["metadata"]["name"]) for p in MANIFESTS for doc in documents(p)}
    assert {
        ("Deployment", "orders"),
        ("Deployment", "mendpoint-gateway"),
        ("HorizontalPodAutoscaler", "mendpoint-gateway"),
        ("PodDisruptionBudget", "mendpoint-gateway"),
        ("Deployment", "mendpoint-resolver"),
        ("Service", "mendpoint-resolver"),
        ("Secret", "mendpoint-resolver-token"),
        ("Secret", "mendpoint-admin-token"),
        ("Secret", "orders-mendpoint-admin-token"),
        ("NetworkPolicy", "mendpoint-resolver"),
        ("Deployment", "mendpoint-redis"),
        ("Service", "mendpoint-redis"),
        ("Secret", "mendpoint-redis-password"),
        ("NetworkPolicy", "mendpoint-redis"),
        ("Secret", "mendpoint-session-key"),
        ("NetworkPolicy", "mendpoint-gateway"),
    } <= kinds


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_mendpoint_container_args_parse_and_configs_load(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = documents(path)
    config_maps = {
        doc["metadata"]["name"]: doc["data"] for doc in docs if doc["kind"] == "ConfigMap"
    }
    config_maps.update(secrets())
    checked = 0
    for doc in docs:
        for container in containers(doc):
            if "command" in container:  # the demo app container, not Mendpoint
                continue
            argv = container["args"]
            parses(argv)
            mounted = _materialise(doc, config_maps, tmp_path)
            config_path = mounted[argv[argv.index("--config") + 1]]
            config = yaml.safe_load(config_path.read_text())
            resolver_spec = config.get("resolver", {})
            if "token_file" in resolver_spec:  # the Pod's path, where the Secret is mounted
                monkeypatch.setenv(TOKEN_ENV, str(mounted[resolver_spec["token_file"]]))
            if "admin_token_file" in config:
                monkeypatch.setenv(ADMIN_TOKEN_ENV, str(mounted[config["admin_token_file"]]))
            if "password_file" in config.get("fleet", {}):  # the Pod's path, as above
                fleet = config["fleet"] | {
                    "password_file": str(mounted[config["fleet"]["password_file"]])
                }
                if "sessions" in fleet:
                    sessions = fleet["sessions"]
                    key_file = str(mounted[sessions["key_file"]])
                    fleet["sessions"] = sessions | {"key_file": key_file}
                config_path.write_text(yaml.safe_dump(config | {"fleet": fleet}))
            if "--token-file" in argv:
                assert read_tokens(str(mounted[argv[argv.index("--token-file") + 1]]))
            loaded = (load_catalog if argv[0] == "resolver" else load_config)(str(config_path))
            assert loaded.rules or loaded.skills
            probes = [
                container.get(k, {}).get("httpGet", {}).get("path")
                for k in ("readinessProbe", "livenessProbe")
            ]
            assert set(probes) <= {"/readyz", "/healthz"} and all(probes)
            checked += 1
    assert checked >= 1


def test_every_admin_port_is_the_default() -> None:
    """The image, compose file, Pods and probes use the default admin port (not Prometheus's
    own 9090: docs/operations.md#admin-listener); the PodMonitors scrape it by its name
    (test_each_gateway_is_scraped_with_the_token_it_checks)."""
    port = int(DEFAULT_ADMIN.rpartition(":")[2])
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert f"EXPOSE 8080 {port}" in dockerfile and f"127.0.0.1:{port}/healthz" in dockerfile
    seen = 0
    for name, deployment in objects("Deployment").items():
        for container in containers(deployment):
            admin = [p for p in container.get("ports", []) if p["name"] == "admin"]
            if admin and container["args"][0] == "serve":
                assert admin[0]["containerPort"] == port, name
                seen += 1
    assert seen >= 2
    for path in MANIFESTS:
        for doc in documents(path):
            for text in doc.get("data", {}).values():
                config = yaml.safe_load(text)
                if isinstance(config, dict) and "admin" in config:
                    assert config["admin"] == f"0.0.0.0:{port}", path


def test_no_shipped_admin_listener_is_open_to_others() -> None:
    """The image leaves the admin port on the container's loopback (the gateway's default;
    MENDPOINT_ADMIN would win over a config's `admin`, so the image sets none); a compose
    service either keeps it there, unpublished, or binds the container's interface with a
    token from a compose secret and publishes it on the host's loopback alone; and every
    manifest that binds it to the Pod's address has a token from a Secret, whose shipped
    placeholder the gateway refuses (docs/security.md#admin-authentication)."""
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert "MENDPOINT_ADMIN" not in dockerfile.split("ENV ", 1)[1].split("EXPOSE")[0]
    assert DEFAULT_ADMIN.startswith("127.0.0.1:")
    declared = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())["secrets"]
    reached = []
    for name, service in gateway_services().items():
        assert "MENDPOINT_ADMIN" not in service.get("environment", {})
        compose_config = yaml.safe_load(config_volume(service).read_text())
        host, port = parse_host_port(compose_config.get("admin", DEFAULT_ADMIN))
        published = [p for p in service.get("ports", []) if p.rpartition(":")[2] == str(port)]
        if is_loopback(host):
            assert not published, name
            continue
        secret = compose_config["admin_token_file"].removeprefix(COMPOSE_SECRETS)
        assert secret in secret_names(service) and set(declared[secret]) == {"environment"}, name
        assert published == [f"127.0.0.1:{port}:{port}"], name
        reached.append(name)
    assert reached == ["mendpoint"]  # the demo's gateway: its console from the host
    checked = 0
    for name, deployment in objects("Deployment").items():
        for container in containers(deployment):
            if container["args"][0] != "serve" or "command" in container:
                continue
            volumes = deployment["spec"]["template"]["spec"]["volumes"]
            (config_map,) = [v["configMap"]["name"] for v in volumes if "configMap" in v]
            config = yaml.safe_load(objects("ConfigMap")[config_map]["data"]["gateway.yaml"])
            assert not is_loopback(parse_host_port(config["admin"])[0]), name  # probed there
            secret = next(
                v["secret"]["secretName"]
                for v in volumes
                if "secret" in v
                and any(
                    config["admin_token_file"].startswith(m + "/")
                    for m in mounts_of(deployment, v["secret"]["secretName"])
                )
            )
            placeholder = objects("Secret")[secret]["stringData"]["token"]
            with pytest.raises(TokenError):
                read_tokens_from_text(placeholder)
            checked += 1
    assert checked == 2


def read_tokens_from_text(text: str) -> tuple[str, ...]:
    with tempfile.NamedTemporaryFile("w", suffix=".token") as handle:
        handle.write(text)
        handle.flush()
        return read_tokens(handle.name)


def secrets() -> dict[str, dict[str, str]]:
    """Every Secret of the manifests, its placeholder token replaced as the operator must."""
    found = {}
    for path in MANIFESTS:
        for doc in documents(path):
            if doc["kind"] == "Secret":
                data = dict(doc["stringData"])
                found[doc["metadata"]["name"]] = {k: OPERATOR_TOKEN for k in data}
    return found


KUBERNETES_DEFAULT_MODE = 0o644
"""A Secret or ConfigMap volume's files when the manifest names no `defaultMode`."""


def test_no_secret_is_mounted_readable_by_every_user() -> None:
    """The gateway refuses a token or key file every user can read (docs/security.md)."""
    mounted = [
        (path.name, volume["name"], volume["secret"].get("defaultMode", KUBERNETES_DEFAULT_MODE))
        for path in MANIFESTS
        for doc in documents(path)
        if doc["kind"] in ("Deployment", "StatefulSet", "DaemonSet")
        for volume in doc["spec"]["template"]["spec"].get("volumes", [])
        if "secret" in volume
    ]
    assert mounted, "the manifests mount no Secret: this test checks nothing"
    assert [m for m in mounted if m[2] & 0o004] == []


def _materialise(
    doc: dict[str, Any], config_maps: dict[str, dict[str, str]], root: Path
) -> dict[str, Path]:
    """Write each mounted ConfigMap or Secret where the Pod would see it; map mount paths to
    files."""
    pod = doc["spec"]["template"]["spec"]
    volumes = {v["name"]: v["configMap"] for v in pod["volumes"] if "configMap" in v}
    volumes.update(
        {
            v["name"]: {
                "name": v["secret"]["secretName"],
                "defaultMode": v["secret"].get("defaultMode", KUBERNETES_DEFAULT_MODE),
            }
            for v in pod["volumes"]
            if "secret" in v
        }
    )
    files: dict[str, Path] = {}
    for container in pod["containers"]:
        for mount in container.get("volumeMounts", []):
            if mount["name"] not in volumes:  # an emptyDir, say: nothing to load
                continue
            source = volumes[mount["name"]]
            data = config_maps[source["name"]]
            items = source.get("items") or [{"key": k, "path": k} for k in data]
            for item in items:
                target = root / mount["mountPath"].lstrip("/") / item["path"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(data[item["key"]])
                # As the kubelet mounts it: the Secret's defaultMode (0644 unless it says).
                target.chmod(item.get("mode", source.get("defaultMode", KUBERNETES_DEFAULT_MODE)))
                files[f"{mount['mountPath']}/{item['path']}"] = target
    return files


def objects(kind: str) -> dict[str, dict[str, Any]]:
    return {
        doc["metadata"]["name"]: doc
        for p in MANIFESTS
        for doc in documents(p)
        if doc["kind"] == kind
    }


def mounts_of(deployment: dict[str, Any], secret: str) -> list[str]:
    """Where `deployment`'s Mendpoint container sees `secret` mounted."""
    pod = deployment["spec"]["template"]["spec"]
    volumes = {v["name"] for v in pod["volumes"] if v.get("secret", {}).get("secretName") == secret}
    (container,) = [c for c in pod["containers"] if "command" not in c]
    return [m["mountPath"] for m in container["volumeMounts"] if m["name"] in volumes]


def test_the_resolver_token_comes_from_one_secret_in_both_deployments(tmp_path: Path) -> None:
    """The resolver's --token-file and the gateway's resolver.token_file are that Secret's key,
    and the shipped placeholder is refused, so nobody runs with the token printed here."""
    secret = objects("Secret")["mendpoint-resolver-token"]
    name, keys = secret["metadata"]["name"], list(secret["stringData"])
    placeholder = tmp_path / "placeholder"
    placeholder.write_text(secret["stringData"][keys[0]])
    with pytest.raises(TokenError):
        read_tokens(str(placeholder))
    deployments = objects("Deployment")
    resolver, gateway = deployments["mendpoint-resolver"], deployments["mendpoint-gateway"]
    expected = {f"{mount}/{keys[0]}" for mount in mounts_of(resolver, name)}
    args = containers(resolver)[0]["args"]
    assert args[args.index("--token-file") + 1] in expected
    config = yaml.safe_load(objects("ConfigMap")["mendpoint-gateway"]["data"]["gateway.yaml"])
    assert config["resolver"]["token_file"] in {
        f"{mount}/{keys[0]}" for mount in mounts_of(gateway, name)
    }
    for deployment in (resolver, gateway):
        pod = deployment["spec"]["template"]["spec"]
        # Secret files are root-owned: the non-root user reads them through its group.
        assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsUser"]


@pytest.mark.parametrize("policy_name", ["mendpoint-resolver", "mendpoint-redis"])
def test_only_gateway_pods_may_reach_the_resolver_and_the_store(policy_name: str) -> None:
    policy = objects("NetworkPolicy")[policy_name]
    deployments = objects("Deployment")
    labels = {name: d["spec"]["template"]["metadata"]["labels"] for name, d in deployments.items()}
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    selected = [
        n for n, lab in labels.items() if spec["podSelector"]["matchLabels"].items() <= lab.items()
    ]
    assert selected == [policy_name]
    (rule,) = spec["ingress"]
    (peer,) = rule["from"]
    assert set(peer) == {"podSelector"}  # same namespace, no ipBlock, no other namespaces
    admitted = [
        n for n, lab in labels.items() if peer["podSelector"]["matchLabels"].items() <= lab.items()
    ]
    assert admitted == ["mendpoint-gateway"]
    ports = containers(deployments[policy_name])[0]["ports"]
    assert [p["port"] for p in rule["ports"]] in (
        [p["name"] for p in ports],
        [p["containerPort"] for p in ports],
    )


def test_only_gateway_pods_may_reach_the_relay_port() -> None:
    """fleet.sessions' internal port is admitted from the gateway's Pods only, its key comes
    from a Secret whose placeholder the gateway refuses, and the other ports stay open as
    they were (docs/security.md#bridge-sessions-across-replicas)."""
    gateway = objects("Deployment")["mendpoint-gateway"]
    ports = {p["name"]: p["containerPort"] for p in containers(gateway)[0]["ports"]}
    config = yaml.safe_load(objects("ConfigMap")["mendpoint-gateway"]["data"]["gateway.yaml"])
    sessions = config["fleet"]["sessions"]
    assert parse_host_port(sessions["listen"])[1] == ports["relay"]
    secret = objects("Secret")["mendpoint-session-key"]
    assert sessions["key_file"] in {
        f"{mount}/{key}"
        for mount in mounts_of(gateway, "mendpoint-session-key")
        for key in secret["stringData"]
    }
    assert all(len(value) < MIN_KEY_CHARS for value in secret["stringData"].values())
    spec = objects("NetworkPolicy")["mendpoint-gateway"]["spec"]
    labels = gateway["spec"]["template"]["metadata"]["labels"]
    assert spec["podSelector"]["matchLabels"].items() <= labels.items()
    open_rule, relay_rule = spec["ingress"]
    assert "from" not in open_rule  # traffic and probes from wherever they came
    assert {p["port"] for p in open_rule["ports"]} == {ports["http"], ports["admin"]}
    (peer,) = relay_rule["from"]
    assert set(peer) == {"podSelector"} and peer["podSelector"]["matchLabels"] == labels
    assert [p["port"] for p in relay_rule["ports"]] == [ports["relay"]]


def test_dockerfile_is_multi_stage_non_root_with_healthcheck() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    stages = re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE)
    assert len(stages) == 2 and all(s.startswith("python:3.11-slim") for s in stages)
    final = text.split("\nFROM ")[-1]
    assert "USER 10001" in final and "HEALTHCHECK" in final
    assert "gcc" not in final and "build-essential" not in final
    entry = json.loads(re.search(r"^ENTRYPOINT (.+)$", text, re.MULTILINE).group(1))  # type: ignore[union-attr]
    command = json.loads(re.search(r"^CMD (.+)$", text, re.MULTILINE).group(1))  # type: ignore[union-attr]
    assert entry == ["mendpoint"]
    parses([*command, "--upstream", "http://demo:9000"])
    for copied in re.findall(r"^COPY (?!--from)(\S+)", text, re.MULTILINE):
        assert (DEPLOY.parent / copied).exists(), copied


def compose_services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = yaml.safe_load(
        (DEPLOY / "docker-compose.yml").read_text()
    )["services"]
    return services


def gateway_services() -> dict[str, dict[str, Any]]:
    """The compose services that run `mendpoint serve`, whatever their profile."""
    return {
        name: service
        for name, service in compose_services().items()
        if service.get("command", [""])[0] == "serve"
    }


def config_volume(service: dict[str, Any]) -> Path:
    """The file a gateway service mounts where its --config points."""
    command = service["command"]
    target = command[command.index("--config") + 1]
    (source,) = [v.split(":")[0] for v in service["volumes"] if v.split(":")[1] == target]
    return DEPLOY / str(source)


def secret_names(service: dict[str, Any]) -> list[str]:
    """The secrets a compose service mounts, in the short syntax (a name) or the long one."""
    return [s if isinstance(s, str) else s["source"] for s in service.get("secrets", [])]


def compose_secret_files(service: dict[str, Any], root: Path) -> dict[str, str]:
    """Each secret a compose service mounts, written under `root` with the mode compose gives
    it (the long syntax's `mode`, else compose's default 0444), as the operator's environment
    would fill it: where the container reads it → where the test wrote it."""
    files = {}
    for entry in service.get("secrets", []):
        name, mode = (entry, 0o444) if isinstance(entry, str) else (entry["source"], 0o444)
        if isinstance(entry, dict) and "mode" in entry:
            given = entry["mode"]  # YAML 1.2's 0o400 reaches PyYAML as a string
            mode = int(given.removeprefix("0o"), 8) if isinstance(given, str) else given
        path = root / name
        path.write_text(OPERATOR_TOKEN + "\n")
        path.chmod(mode)
        files[COMPOSE_SECRETS + name] = str(path)
    return files


def compose_loaded(service: dict[str, Any], root: Path) -> LoadedConfig:
    """A compose service's config loaded by the real loader, with each secret it mounts
    where its config reads it, at the mode compose gives it."""
    text = config_volume(service).read_text()
    for mounted, written in compose_secret_files(service, root).items():
        text = text.replace(mounted, written)
    path = root / "compose-gateway.yaml"
    path.write_text(text)
    return load_config(str(path))


def test_compose_file_references_real_files_and_valid_commands(tmp_path: Path) -> None:
    services = compose_services()
    default = {name for name, service in services.items() if "profiles" not in service}
    assert default == {"demo", "mendpoint"}  # `docker compose up` runs what it always did
    build = services["demo"]["build"]
    assert (DEPLOY / build["context"] / build["dockerfile"]).exists()
    assert (DEPLOY.parent / "examples" / "demo_api.py").exists()
    gateways = gateway_services()
    assert set(gateways) == {"mendpoint", "replica-a", "replica-b"}
    for name, gateway in gateways.items():
        parses(gateway["command"])
        for volume in gateway["volumes"]:
            assert (DEPLOY / volume.split(":")[0]).exists(), (name, volume)
    assert compose_loaded(services["mendpoint"], tmp_path).rules
    for service in services.values():
        for volume in service.get("volumes", []):
            assert (DEPLOY / volume.split(":")[0]).exists(), volume


# The compose file's `fleet` profile: what `make fleet-demo` runs (docs/operations.md#fleet).
FLEET_PROFILE = {"redis", "replica-a", "replica-b", "front"}
COMPOSE_SECRETS = "/run/secrets/"  # where compose mounts a service's secrets


def test_the_fleet_profile_publishes_only_its_front_on_loopback() -> None:
    services = compose_services()
    fleet = {name for name, s in services.items() if "fleet" in s.get("profiles", [])}
    assert fleet == FLEET_PROFILE
    published = {name: services[name]["ports"] for name in fleet if "ports" in services[name]}
    assert list(published) == ["front"]  # not the store, not a replica's relay port
    (front,) = published["front"]
    host, port, _ = front.split(":")
    assert host == "127.0.0.1"
    # `--profile fleet up` runs the default services too: the front takes a port of its own.
    assert port not in {p.split(":")[1] for p in services["mendpoint"]["ports"]}


def test_each_replica_loads_its_fleet_config_with_the_compose_secrets(tmp_path: Path) -> None:
    """The store is the compose service, the password and session key are secrets the replica
    mounts (taken from the environment: nothing secret in the repository), the relay port is
    8492, and the real loader accepts the config with the secrets where compose puts them."""
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services, declared = compose["services"], compose["secrets"]
    replicas = {name: services[name] for name in ("replica-a", "replica-b")}
    assert replicas["replica-a"] == replicas["replica-b"]  # one definition, two containers
    for name, service in replicas.items():
        config = yaml.safe_load(config_volume(service).read_text())
        fleet = config["fleet"]
        assert fleet["redis"].partition("://")[2].partition(":")[0] == "redis"
        sessions = fleet["sessions"]
        mounted = {COMPOSE_SECRETS + secret for secret in secret_names(service)}
        assert {fleet["password_file"], sessions["key_file"]} == mounted
        assert all(set(declared[secret]) == {"environment"} for secret in secret_names(service))
        listen = parse_host_port(service["environment"]["MENDPOINT_LISTEN"])[1]
        assert parse_host_port(sessions["listen"])[1] == 8492 != listen
        files = compose_secret_files(service, tmp_path)
        fleet = fleet | {
            "password_file": files[fleet["password_file"]],
            "sessions": sessions | {"key_file": files[sessions["key_file"]]},
        }
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config | {"fleet": fleet}))
        loaded = load_config(str(path))
        assert loaded.rules and loaded.fleet_password == OPERATOR_TOKEN
        assert loaded.config.fleet is not None and loaded.config.fleet.sessions is not None


def section(text: str, header: str) -> list[str]:
    """The lines of an HAProxy config section, without comments."""
    lines, inside = [], False
    for line in text.splitlines():
        if line and not line[0].isspace():
            inside = line.strip() == header
        elif inside and line.strip() and not line.strip().startswith("#"):
            lines.append(line.strip())
    return lines


def test_the_front_balances_the_replicas_as_fleet_demo_does() -> None:
    """HAProxy's own check accepts the config (the replicas' names resolve at run time), its
    servers are the two replicas' traffic ports, and it balances as `make fleet-demo` does:
    every request anew, round-robin."""
    services = compose_services()
    front = services["front"]
    (volume,) = front["volumes"]
    source, target = volume.split(":")[:2]
    assert target == "/usr/local/etc/haproxy/haproxy.cfg"  # where the official image reads it
    checked = subprocess.run(
        [program("haproxy"), "-c", "-f", str(DEPLOY / source)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    text = (DEPLOY / source).read_text()
    replicas = {n: s for n, s in services.items() if n.startswith("replica-")}
    ports = {
        n: parse_host_port(s["environment"]["MENDPOINT_LISTEN"])[1] for n, s in replicas.items()
    }
    servers = [
        line.split()[2] for line in section(text, "backend replicas") if line.startswith("server ")
    ]
    assert sorted(servers) == sorted(f"{name}:{port}" for name, port in ports.items())
    assert set(front["depends_on"]) == set(replicas)
    (bind,) = [line for line in section(text, "frontend fleet") if line.startswith("bind ")]
    assert bind == f"bind :{front['ports'][0].rpartition(':')[2]}"
    assert section(text, "defaults") == section(HAPROXY, "defaults")
    assert "balance roundrobin" in section(text, "backend replicas")


def test_the_store_keeps_nothing_on_disk_and_answers_only_with_its_password(
    tmp_path: Path,
) -> None:
    """The redis service's own command, run with Debian's redis-server: the password comes
    from the secret's file (never on a command line), nothing is saved."""
    import redis as redis_py

    service = compose_services()["redis"]
    assert service["entrypoint"] == ["sh", "-c"] and service["secrets"] == ["fleet_redis_password"]
    (script,) = service["command"]
    assert f"{COMPOSE_SECRETS}fleet_redis_password" in script and OPERATOR_TOKEN not in script
    write_secret(tmp_path / "fleet_redis_password", OPERATOR_TOKEN)
    port = free_port()
    local = (
        script.replace("$$", "$")  # compose's escape of a literal $
        .replace(COMPOSE_SECRETS, f"{tmp_path}/")
        .replace("exec redis-server", f"exec {program('redis-server')}")
        .replace("--port 6379", f"--port {port} --bind 127.0.0.1")
    )
    server = subprocess.Popen(
        ["sh", "-c", local],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # sh and the redis-server it starts: one group to stop
    )
    try:
        wait_port(port)
        with pytest.raises(redis_py.AuthenticationError):
            redis_py.Redis(port=port).ping()
        client = redis_py.Redis(port=port, password=OPERATOR_TOKEN, decode_responses=True)
        assert client.ping() is True
        assert client.config_get("save") == {"save": ""}
        assert client.config_get("appendonly") == {"appendonly": "no"}
        client.close()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=10)
    assert not list(tmp_path.glob("*.rdb")) and not list(tmp_path.glob("appendonly*"))


# What a process needs past drain + grace to close what is left and exit (a supervisor's
# workers included): the drain itself ends within drain + grace (tests/serve/test_drain.py).
EXIT_MARGIN_S = 5
# Kubernetes kills a Pod this long after it starts terminating, unless the Pod says otherwise.
DEFAULT_TERMINATION_S = 30


def shutdown_of(config_text: str) -> ShutdownSpec:
    """The `shutdown:` settings of a gateway config, with the defaults it leaves out."""
    return ShutdownSpec(**(yaml.safe_load(config_text).get("shutdown") or {}))


def pre_stop_s(container: dict[str, Any]) -> float:
    """How long a container's preStop hook takes before it gets SIGTERM (0: none)."""
    hook = container.get("lifecycle", {}).get("preStop")
    if hook is None:
        return 0
    if "sleep" in hook:
        return float(hook["sleep"]["seconds"])
    command = hook.get("exec", {}).get("command", [])
    assert command[:1] == ["sleep"] and len(command) == 2, f"a preStop it cannot time: {hook}"
    return float(command[1])


def test_pods_outlast_the_drain() -> None:
    """terminationGracePeriodSeconds leaves room for the whole drain (a preStop hook, then
    drain_delay_s + grace_s) and for the process to exit; any other container in the Pod (the
    app behind a sidecar) stays up, through its preStop, until the drain is over."""
    config_maps = {doc["metadata"]["name"]: doc["data"] for doc in objects("ConfigMap").values()}
    checked = 0
    for name, deployment in objects("Deployment").items():
        pod = deployment["spec"]["template"]["spec"]
        termination = pod.get("terminationGracePeriodSeconds", DEFAULT_TERMINATION_S)
        mendpoint = [c for c in containers(deployment) if c["args"][0] == "serve"]
        if not mendpoint:
            continue
        (gateway,) = mendpoint
        argv = gateway["args"]
        config_file = argv[argv.index("--config") + 1].rpartition("/")[2]
        (volume,) = [v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v]
        shutdown = shutdown_of(config_maps[volume][config_file])
        drain = pre_stop_s(gateway) + shutdown.drain_delay_s + shutdown.grace_s
        assert termination >= drain + EXIT_MARGIN_S, (name, termination, drain)
        for other in containers(deployment):
            if other is not gateway:
                assert pre_stop_s(other) >= drain, (name, other["name"])
                assert termination >= pre_stop_s(other) + EXIT_MARGIN_S, (name, other["name"])
        checked += 1
    assert checked >= 2


def compose_seconds(duration: str) -> float:
    """A Compose duration such as `30s` or `1m30s`."""
    match = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", duration)
    assert match is not None and duration, duration
    return int(match.group(1) or 0) * 60 + int(match.group(2) or 0)


def test_compose_waits_out_the_drain() -> None:
    """`docker compose stop` kills after 10 s unless told otherwise; the gateway's drain takes
    up to drain_delay_s + grace_s."""
    for name, service in gateway_services().items():
        shutdown = shutdown_of(config_volume(service).read_text())
        drain = shutdown.drain_delay_s + shutdown.grace_s
        assert compose_seconds(service["stop_grace_period"]) >= drain + EXIT_MARGIN_S, name


SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum")}


def exported_metric_names() -> set[str]:
    """Series names the gateway exposes, including for labelled metrics not yet observed."""
    return {
        family.name + suffix for family in REGISTRY.collect() for suffix in SUFFIXES[family.type]
    }


def test_every_promql_expression_names_real_metrics() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "mendpoint.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(exprs) >= 10
    exported = exported_metric_names()
    used = {name for expr in exprs for name in re.findall(r"\bmendpoint_[a-z_]+", expr)}
    assert used, "the dashboard queries no Mendpoint metric"
    unknown = {name for name in used if name not in exported}
    assert not unknown, f"metrics the gateway does not export: {sorted(unknown)}"


# Prometheus scrapes the gateways' /metrics with the admin token: with a token set, the admin
# listener answers /metrics 401 without it (docs/security.md#admin-authentication). No Pod
# invites the annotation-driven job, which sends none, and each gateway's PodMonitor sends the
# token from the Secret its gateway reads `admin_token_file` from.

PODMONITORS = DEPLOY / "kubernetes" / "monitoring" / "podmonitors.yaml"

# What the Prometheus Operator's PodMonitor (monitoring.coreos.com/v1) takes, of what these
# use: kubernetes-validate has no schema for a custom resource, so its shape is checked here.
SPEC_KEYS = {"selector", "podMetricsEndpoints", "namespaceSelector", "jobLabel"}
ENDPOINT_KEYS = {"port", "path", "scheme", "interval", "scrapeTimeout", "authorization"}


def guarded_gateways() -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Each Deployment whose Mendpoint requires the admin token: (Deployment, its config)."""
    found = {}
    config_maps = {name: doc["data"] for name, doc in objects("ConfigMap").items()}
    for name, deployment in objects("Deployment").items():
        for container in containers(deployment):
            if "command" in container or container["args"][0] != "serve":
                continue
            argv = container["args"]
            config_file = argv[argv.index("--config") + 1].rpartition("/")[2]
            pod = deployment["spec"]["template"]["spec"]
            (volume,) = [v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v]
            config = yaml.safe_load(config_maps[volume][config_file])
            if "admin_token_file" in config:
                found[name] = (deployment, config)
    return found


def test_no_guarded_pod_invites_a_scrape_without_the_token() -> None:
    gateways = guarded_gateways()
    assert set(gateways) == {"orders", "mendpoint-gateway"}
    for name, (deployment, _) in gateways.items():
        annotations = deployment["spec"]["template"]["metadata"].get("annotations", {})
        assert annotations.get("prometheus.io/scrape") != "true", name


def test_each_gateway_is_scraped_with_the_token_it_checks() -> None:
    monitors = documents(PODMONITORS)
    for monitor in monitors:
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["kind"] == "PodMonitor" and monitor["metadata"]["name"]
        assert set(monitor["spec"]) <= SPEC_KEYS
        assert "namespaceSelector" not in monitor["spec"]  # the Pods' and Secret's namespace
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            assert set(endpoint) <= ENDPOINT_KEYS
    admin_port = parse_host_port(DEFAULT_ADMIN)[1]
    for name, (deployment, config) in guarded_gateways().items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        (monitor,) = [
            m for m in monitors if m["spec"]["selector"]["matchLabels"].items() <= labels.items()
        ]
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        (mendpoint,) = [c for c in containers(deployment) if "command" not in c]
        ports = {p["name"]: p["containerPort"] for p in mendpoint["ports"]}
        assert ports[endpoint["port"]] == parse_host_port(config["admin"])[1] == admin_port
        assert endpoint["path"] == "/metrics"
        authorization = endpoint["authorization"]
        assert authorization["type"] == "Bearer"
        secret, key = authorization["credentials"]["name"], authorization["credentials"]["key"]
        assert config["admin_token_file"] in {f"{m}/{key}" for m in mounts_of(deployment, secret)}
        assert key in objects("Secret")[secret]["stringData"], name
