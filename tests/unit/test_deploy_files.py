"""The deployment files, checked without a Docker engine.

CI has no engine and no docker/compose CLI, so these tests read the files as
data: docker-compose.yml is validated against the official Compose
Specification JSON schema, and the rules a schema cannot express are checked
one by one (a scalable fanout-worker, the start-up order, topics with enough
partitions, Prometheus discovering every replica, hardened Dockerfiles, a
dashboard whose every panel queries something that exists).

Where the schema comes from
---------------------------
``tests/unit/data/compose-spec.json`` is the compose-spec project's
``schema/compose-spec.json`` (github.com/compose-spec/compose-spec, Apache-2.0;
the licence is ``compose-spec.LICENSE`` beside it). It was copied byte for byte
out of the ``check-jsonschema`` 0.39.0 wheel from PyPI
(``check_jsonschema/builtin_schemas/vendor/compose-spec.json``), which vendors
it from upstream and records its sha256 (the ``COMPOSE_SPEC_SHA256`` below).
We vendor the file instead of depending on check-jsonschema because 0.39
requires click>=8.5 while faust-streaming caps click<8.4, and the 0.38 line
fails to import with the click we pin. To refresh it::

    pip download --no-deps -d /tmp/cj check-jsonschema==<version>
    unzip -p /tmp/cj/*.whl check_jsonschema/builtin_schemas/vendor/compose-spec.json \\
        > tests/unit/data/compose-spec.json
    # ...and the licence, then update COMPOSE_SPEC_SHA256 here.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import importlib
import json
import re
import shlex
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema.validators import validator_for

from fanline_shared.config import Env, HttpSettings, KafkaSettings

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
COMPOSE_FILE = REPO / "docker-compose.yml"
COMPOSE_SPEC = DATA / "compose-spec.json"
COMPOSE_SPEC_SHA256 = "d549057ebc2925f39f62799eab0db7b9e2c18b35b6c00595199116da3ed10e64"
PROMETHEUS_FILE = REPO / "deploy" / "prometheus" / "prometheus.yml"
GRAFANA_DIR = REPO / "deploy" / "grafana"
DASHBOARD_DIR = GRAFANA_DIR / "dashboards"
METRICS_MODULE = REPO / "shared" / "src" / "fanline_shared" / "metrics.py"

# The metrics the overview dashboard must show (named in the deployment brief).
REQUIRED_DASHBOARD_METRICS = (
    "fanline_http_requests_total",
    "fanline_http_request_duration_seconds_bucket",
    "fanline_tweets_posted_total",
    "fanline_timeline_rows_written_total",
    "fanline_delivery_lag_seconds_bucket",
    "fanline_consumer_lag_messages",
    "fanline_events_dead_lettered_total",
    "fanline_events_consumed_total",
)
# The smallest partition count we accept: the most fan-out replicas we support.
MIN_PARTITIONS = 8


@dataclass(frozen=True)
class Service:
    """One Fanline service: compose service name == its folder under services/."""

    name: str
    script: str  # console script in its pyproject.toml == the image's ENTRYPOINT
    env_prefix: str  # FANLINE_<prefix>_HOST / FANLINE_<prefix>_PORT
    config_module: str  # where its Settings live (the default port is read from it)
    port: int

    def stages(self) -> list[Stage]:
        """The Dockerfile's stages as built for this service (SERVICE=name)."""
        return dockerfile_stages(DOCKERFILE, (("SERVICE", self.name),))

    @property
    def metrics_port(self) -> int:
        """Where it serves /metrics: its port + 50 unless set (``HttpSettings``)."""
        return HttpSettings.from_env(Env({}), self.env_prefix, self.port).metrics_port


SERVICES = (
    Service("api", "fanline-api", "API", "fanline_api.config", 8000),
    Service("social-graph", "fanline-social-graph", "SOCIAL_GRAPH", "fanline_social_graph.config", 8001),
    Service("tweet-store", "fanline-tweet-store", "TWEET_STORE", "fanline_tweet_store.config", 8002),
    Service("fanout-worker", "fanline-fanout-worker", "WORKER", "fanline_fanout.config", 8003),
)
STORAGE_SERVICES = ("social-graph", "tweet-store")
DOCKERFILE = REPO / "Dockerfile"  # every image, built with --build-arg SERVICE=<name>
by_service = pytest.mark.parametrize("svc", SERVICES, ids=lambda s: s.name)


# --------------------------------------------------------------------------
# loading helpers
# --------------------------------------------------------------------------


@cache
def compose() -> dict[str, Any]:
    # safe_load resolves the `<<: *anchor` merge keys the file uses, exactly as
    # compose does.
    doc = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(doc, dict)
    return doc


def compose_service(name: str) -> dict[str, Any]:
    services = compose()["services"]
    assert name in services, f"docker-compose.yml has no service {name!r}"
    return services[name]


def environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as a dict, whichever of the two forms it uses."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {key: "" if value is None else str(value) for key, value in env.items()}


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    """``{dependency: condition}``; the short list form means service_started."""
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: spec.get("condition", "service_started") for name, spec in deps.items()}


def command_text(service: dict[str, Any]) -> str:
    command = service.get("command") or ""
    return " ".join(command) if isinstance(command, list) else command


def named_volume_mounts(service: dict[str, Any]) -> dict[str, str]:
    """``{volume name: container path}`` for the service's named-volume mounts."""
    mounts = {}
    for volume in service.get("volumes") or []:
        if isinstance(volume, str):
            source, _, rest = volume.partition(":")
            target = rest.split(":")[0]
            if source and not source.startswith((".", "/", "~", "$")):
                mounts[source] = target
        elif volume.get("type", "volume") == "volume" and volume.get("source"):
            mounts[volume["source"]] = volume["target"]
    return mounts


def bind_mounts(service: dict[str, Any]) -> dict[str, str]:
    """``{repository-relative source: container path}`` for bind mounts."""
    mounts = {}
    for volume in service.get("volumes") or []:
        if isinstance(volume, str) and volume.startswith("./"):
            source, target = volume.split(":")[:2]
            mounts[source.removeprefix("./").rstrip("/")] = target.rstrip("/")
    return mounts


@cache
def prometheus_config() -> dict[str, Any]:
    doc = yaml.safe_load(PROMETHEUS_FILE.read_text())
    assert isinstance(doc, dict)
    return doc


def scrape_job(name: str) -> dict[str, Any]:
    jobs = {job["job_name"]: job for job in prometheus_config()["scrape_configs"]}
    assert name in jobs, f"prometheus.yml has no scrape job {name!r} (jobs: {sorted(jobs)})"
    return jobs[name]


def dashboards() -> list[Path]:
    return sorted(DASHBOARD_DIR.glob("*.json"))


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, descending into (collapsed) rows; rows themselves query nothing."""
    for panel in panels:
        if panel.get("type") == "row":
            yield from all_panels(panel.get("panels", []))
        else:
            yield panel


# --------------------------------------------------------------------------
# a small Dockerfile reader (enough for our own files; hadolint is not here)
# --------------------------------------------------------------------------


@dataclass
class Stage:
    base: str  # the FROM image after ARG substitution
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args_of(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def env(self) -> dict[str, str]:
        values: dict[str, str] = {}
        for args in self.args_of("ENV"):
            for token in shlex.split(args):
                key, sep, value = token.partition("=")
                assert sep, f"use the ENV KEY=VALUE form, not {args!r}"
                values[key] = value
        return values


def dockerfile_lines(text: str) -> list[str]:
    """Logical lines: comments dropped, backslash continuations joined."""
    lines, pending = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # Docker also ignores comment lines inside a continuation
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a line continuation"
    return lines


def substitute(text: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: variables.get(m.group(1), m.group(0)), text)


@cache
def dockerfile_stages(path: Path, build_args: tuple[tuple[str, str], ...] = ()) -> list[Stage]:
    """The stages, with every ``ARG``'s value (``build_args``, else its
    default) substituted into the instructions after it."""
    given = dict(build_args)
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    scope: dict[str, str] = {}
    for line in dockerfile_lines(path.read_text()):
        keyword, _, args = line.partition(" ")
        keyword, args = keyword.upper(), args.strip()
        if keyword == "FROM":
            words = [w for w in substitute(args, global_args).split() if not w.startswith("--")]
            name = words[2] if len(words) >= 3 and words[1].lower() == "as" else None
            stages.append(Stage(base=words[0], name=name))
            scope = {}
        elif not stages:
            assert keyword == "ARG", f"only ARG may come before the first FROM, found {keyword}"
            key, _, default = args.partition("=")
            global_args[key] = given.get(key, default)
        elif keyword == "ARG":
            key, _, default = args.partition("=")
            scope[key] = given.get(key, default or global_args.get(key, ""))
        else:
            stages[-1].instructions.append((keyword, substitute(args, scope) if keyword in ("RUN", "COPY", "ENV") else args))
    assert stages, f"{path} has no FROM"
    return stages


# --------------------------------------------------------------------------
# a small .dockerignore evaluator (Docker semantics: last match wins, and a
# pattern that matches a parent directory applies to everything below it)
# --------------------------------------------------------------------------


def _ignore_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def dockerignored(path: str, patterns: list[str]) -> bool:
    parts = path.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    ignored = False
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw.removeprefix("!").strip().strip("/")
        regex = _ignore_regex(pattern)
        if any(regex.match(candidate) for candidate in candidates):
            ignored = not negate
    return ignored


# ==========================================================================
# docker-compose.yml: the schema
# ==========================================================================


def test_vendored_compose_schema_is_the_recorded_upstream_file() -> None:
    digest = hashlib.sha256(COMPOSE_SPEC.read_bytes()).hexdigest()
    assert digest == COMPOSE_SPEC_SHA256, (
        "tests/unit/data/compose-spec.json changed; refresh it from upstream as the module docstring says"
    )


@cache
def compose_validator() -> Any:
    schema = json.loads(COMPOSE_SPEC.read_text())
    cls = validator_for(schema)  # the schema names its own draft ($schema)
    cls.check_schema(schema)
    return cls(schema)


def schema_errors(doc: Any) -> list[str]:
    errors = sorted(compose_validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]


def test_compose_file_matches_the_compose_specification() -> None:
    errors = schema_errors(compose())
    assert not errors, "docker-compose.yml breaks the Compose Specification:\n" + "\n".join(errors)


@pytest.mark.parametrize(
    "mutation",
    [
        pytest.param(lambda d: d["services"]["api"].__setitem__("ports", "8000:8000"), id="ports-not-a-list"),
        pytest.param(lambda d: d["services"]["api"].__setitem__("containr_name", "x"), id="misspelt-key"),
        pytest.param(
            lambda d: d["services"]["api"]["depends_on"]["kafka-init"].__setitem__("condition", "service_done"),
            id="unknown-depends-on-condition",
        ),
    ],
)
def test_schema_validation_is_not_vacuous(mutation: Any) -> None:
    """The validator really applies the schema: a broken copy is rejected."""
    broken = copy.deepcopy(compose())
    mutation(broken)
    assert schema_errors(broken)


def test_compose_file_has_no_obsolete_version_key() -> None:
    assert "version" not in compose(), "`version:` is obsolete in the Compose Specification; remove it"


# ==========================================================================
# docker-compose.yml: rules the schema cannot express
# ==========================================================================


def test_fanout_worker_can_be_scaled() -> None:
    """`docker compose up --scale fanout-worker=N` needs generated container
    names and no fixed host ports (the second replica would collide)."""
    worker = compose_service("fanout-worker")
    assert "container_name" not in worker
    assert "ports" not in worker


def test_every_service_has_an_image_or_a_build() -> None:
    for name, service in compose()["services"].items():
        assert "image" in service or "build" in service, f"{name} has neither image nor build"


def test_every_build_uses_the_repository_root_as_context() -> None:
    """Each Dockerfile copies shared/ and constraints.txt, so the context is `.`."""
    built = {name: s["build"] for name, s in compose()["services"].items() if "build" in s}
    assert built
    for name, build in built.items():
        assert isinstance(build, dict), f"{name}: use the long build form with context and dockerfile"
        assert build.get("context") == ".", f"{name}: build context must be the repository root"
        dockerfile = REPO / build.get("dockerfile", "Dockerfile")
        assert dockerfile.is_file(), f"{name}: {dockerfile} does not exist"


@by_service
def test_every_service_is_built_from_the_dockerfile_with_its_name(svc: Service) -> None:
    build = compose_service(svc.name)["build"]
    assert build == {"context": ".", "dockerfile": "Dockerfile", "args": {"SERVICE": svc.name}}


def test_there_is_one_dockerfile() -> None:
    assert not sorted((REPO / "services").glob("*/Dockerfile")), "every image is built from the root Dockerfile"


def _is_one_shot(service: dict[str, Any]) -> bool:
    return str(service.get("restart", "no")) == "no"


@cache
def _has_healthcheck(name: str) -> bool:
    service = compose_service(name)
    if "healthcheck" in service:
        return not service["healthcheck"].get("disable", False)
    build = service.get("build")
    if isinstance(build, dict):
        final = dockerfile_stages(REPO / build["dockerfile"], tuple(build.get("args", {}).items()))[-1]
        return any(not args.upper().startswith("NONE") for args in final.args_of("HEALTHCHECK"))
    return False


def test_depends_on_conditions_fit_what_they_wait_for() -> None:
    """One-shot jobs are waited for until they exit 0; long-running services
    until their healthcheck passes (which they must then have)."""
    services = compose()["services"]
    for name, service in services.items():
        for dependency, condition in depends_on(service).items():
            assert dependency in services, f"{name} depends on unknown service {dependency}"
            if _is_one_shot(services[dependency]):
                assert condition == "service_completed_successfully", f"{name} -> {dependency}"
            elif condition == "service_healthy":
                assert _has_healthcheck(dependency), f"{name} waits for {dependency} to be healthy, but it has no healthcheck"


@pytest.mark.parametrize(
    ("service", "expected"),
    [
        ("kafka-init", {"kafka": "service_healthy"}),
        ("cassandra-init-social-graph", {"cassandra": "service_healthy"}),
        ("cassandra-init-tweet-store", {"cassandra": "service_healthy"}),
        ("social-graph", {"cassandra": "service_healthy", "cassandra-init-social-graph": "service_completed_successfully"}),
        ("tweet-store", {"cassandra": "service_healthy", "cassandra-init-tweet-store": "service_completed_successfully"}),
        (
            "api",
            {
                "kafka-init": "service_completed_successfully",
                "social-graph": "service_healthy",
                "tweet-store": "service_healthy",
                "redis": "service_healthy",
            },
        ),
        ("edge", {"api": "service_healthy"}),
        (
            "fanout-worker",
            {
                "kafka-init": "service_completed_successfully",
                "social-graph": "service_healthy",
                "tweet-store": "service_healthy",
            },
        ),
    ],
)
def test_start_up_order(service: str, expected: dict[str, str]) -> None:
    assert depends_on(compose_service(service)) == expected


@by_service
def test_fanline_services_use_the_real_engines(svc: Service) -> None:
    env = environment(compose_service(svc.name))
    assert env["FANLINE_BACKEND"] == "cassandra"
    assert env["FANLINE_CASSANDRA_HOSTS"] == "cassandra"
    assert env["FANLINE_KAFKA_BOOTSTRAP"] == "kafka:9092"
    assert env["FANLINE_SOCIAL_GRAPH_URL"] == "http://social-graph:8001"
    assert env["FANLINE_TWEET_STORE_URL"] == "http://tweet-store:8002"


@by_service
def test_every_service_requires_the_internal_credential(svc: Service) -> None:
    token = environment(compose_service(svc.name)).get("FANLINE_INTERNAL_TOKEN", "")
    assert token.startswith("${FANLINE_INTERNAL_TOKEN:?"), token


def test_only_the_edge_proxy_and_the_dashboards_are_published() -> None:
    """The api replicas, the storage services and the worker are reached only
    inside the project's network: the edge proxy is the API's one port."""
    published = {name for name, svc in compose()["services"].items() if svc.get("ports")}
    assert published == {"edge", "prometheus", "grafana"}, published


def test_api_requires_a_cursor_secret_and_the_edge_publishes_it_on_8000() -> None:
    api = compose_service("api")
    secret = environment(api).get("FANLINE_CURSOR_SECRET", "")
    # `${VAR:?message}` makes compose refuse to start without it: the built-in
    # development secret must never sign cursors in a real deployment.
    assert secret.startswith("${FANLINE_CURSOR_SECRET:?"), secret
    assert "ports" not in api and "container_name" not in api, "the api scales behind the edge"
    published = [str(p) for p in compose_service("edge").get("ports", [])]
    assert any(re.fullmatch(r"(?:[\d.]+:)?8000:8000(?:/tcp)?", p) for p in published), published


def test_the_api_trusts_exactly_the_edge_proxy_and_shares_its_limits_in_redis() -> None:
    """X-Forwarded-For is believed from the edge's fixed address only, inside
    the project's fixed subnet; the edge sets it and proxies every replica;
    the abuse limits are counted in the redis service (issue #29 item 4)."""
    import ipaddress

    api, edge = environment(compose_service("api")), compose_service("edge")
    subnet = ipaddress.ip_network(compose()["networks"]["default"]["ipam"]["config"][0]["subnet"])
    address = ipaddress.ip_address(edge["networks"]["default"]["ipv4_address"])
    assert address in subnet
    assert api["FANLINE_TRUSTED_PROXIES"] == str(address)
    assert api["FANLINE_RATE_LIMIT_STORAGE"] == "redis://redis:6379" and "redis" in compose()["services"]
    (mount,) = edge["volumes"]
    source = REPO / mount.split(":")[0]
    conf = source.read_text()
    assert "server api:8000" in conf and "proxy_set_header X-Forwarded-For" in conf
    assert "/metrics" not in conf, "the edge proxies the API port, which serves no metrics"


@pytest.mark.parametrize("storage", STORAGE_SERVICES)
def test_cassandra_init_runs_the_storage_image_migrate(storage: str) -> None:
    job = compose_service(f"cassandra-init-{storage}")
    service = compose_service(storage)
    assert job["command"] == ["migrate"]
    assert job["build"] == service["build"] and job["image"] == service["image"]
    assert environment(job) == environment(service)
    assert _is_one_shot(job)


def test_kafka_is_single_node_kraft_without_topic_auto_creation() -> None:
    kafka = compose_service("kafka")
    env = environment(kafka)
    assert kafka["image"] == "apache/kafka:4.1.1"
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert "kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
    # A KRaft cluster id is a base64url UUID: 22 characters, 16 bytes.
    assert len(base64.urlsafe_b64decode(env["CLUSTER_ID"] + "==")) == 16
    assert "healthcheck" in kafka


def test_kafka_init_creates_both_topics_with_enough_partitions() -> None:
    job = compose_service("kafka-init")
    script = command_text(job)
    assert job["image"] == compose_service("kafka")["image"]
    assert "/opt/kafka/bin/kafka-topics.sh" in script
    assert "--create" in script and "--if-not-exists" in script
    topics = KafkaSettings.from_env(Env({}))
    for topic in (topics.events_topic, topics.dlq_topic, topics.chunks_topic):
        assert re.search(rf"(?<![\w.]){re.escape(topic)}(?![\w.])", script), f"kafka-init does not create {topic}"
    counts = {int(n) for n in re.findall(r"--partitions[ =](\d+)", script)}
    assert len(counts) == 1, f"one partition count for both topics, found {counts}"
    (partitions,) = counts
    assert partitions >= MIN_PARTITIONS
    # ...and every service agrees with it (the api and the worker refuse a
    # topic with fewer partitions than FANLINE_TOPIC_PARTITIONS).
    for svc in SERVICES:
        configured = environment(compose_service(svc.name)).get("FANLINE_TOPIC_PARTITIONS", str(topics.partitions))
        assert int(configured) == partitions, f"{svc.name}: FANLINE_TOPIC_PARTITIONS={configured}"


def test_cassandra_has_a_small_heap_and_a_cql_healthcheck() -> None:
    cassandra = compose_service("cassandra")
    env = environment(cassandra)
    assert cassandra["image"] == "cassandra:5.0"
    assert env.get("MAX_HEAP_SIZE") and env.get("HEAP_NEWSIZE"), "the image wants both or neither"
    probe = " ".join(cassandra["healthcheck"]["test"])
    assert "cqlsh" in probe and "describe keyspaces" in probe


@pytest.mark.parametrize(("service", "path"), [("kafka", "/var/lib/kafka/data"), ("cassandra", "/var/lib/cassandra")])
def test_engine_data_lives_in_named_volumes(service: str, path: str) -> None:
    mounts = named_volume_mounts(compose_service(service))
    assert path in mounts.values(), f"{service} keeps {path} in no named volume"
    for volume in mounts:
        assert volume in (compose().get("volumes") or {}), f"volume {volume} is not declared at top level"


def test_observability_services_mount_the_repository_config() -> None:
    assert bind_mounts(compose_service("prometheus")).get("deploy/prometheus/prometheus.yml") == "/etc/prometheus/prometheus.yml"
    grafana = bind_mounts(compose_service("grafana"))
    assert grafana.get("deploy/grafana/provisioning") == "/etc/grafana/provisioning"
    assert "deploy/grafana/dashboards" in grafana
    assert "kafka-exporter" in compose()["services"]


# ==========================================================================
# Prometheus
# ==========================================================================


@by_service
def test_prometheus_discovers_every_replica_through_dns(svc: Service) -> None:
    """A static target on the service name reaches one random replica per
    scrape; DNS service discovery lists each replica's IP as its own target."""
    job = scrape_job(svc.name)
    assert "static_configs" not in job, f"{svc.name}: scrape every replica (dns_sd_configs), not the service name"
    (sd,) = job["dns_sd_configs"]
    assert sd["names"] == [svc.name]
    assert sd.get("type", "SRV") == "A", "compose's DNS answers A queries; SRV needs a port-less record"
    assert sd["port"] == svc.metrics_port, "/metrics is served on the metrics port only"
    assert job.get("metrics_path", "/metrics") == "/metrics"


def test_prometheus_scrapes_the_kafka_exporter_and_only_known_services() -> None:
    services = compose()["services"]
    exporter = scrape_job("kafka-exporter")
    assert any("kafka-exporter:9308" in c["targets"] for c in exporter["static_configs"])
    for job in prometheus_config()["scrape_configs"]:
        for sd in job.get("dns_sd_configs", []):
            for name in sd["names"]:
                assert name in services, f"job {job['job_name']} discovers {name}, which compose does not define"


# ==========================================================================
# Dockerfiles
# ==========================================================================


@by_service
def test_dockerfile_is_multi_stage_on_slim_glibc_python(svc: Service) -> None:
    stages = svc.stages()
    assert len(stages) >= 2, "builder + runtime"
    stage_names = {s.name for s in stages if s.name}
    for stage in stages:
        if stage.base in stage_names:
            continue
        assert stage.base.startswith("python:3.11-slim"), stage.base
        assert "alpine" not in stage.base, "cassandra-driver has no musl wheels"


@by_service
def test_dockerfile_builder_installs_with_constraints(svc: Service) -> None:
    *builders, runtime = svc.stages()
    runs = [args for stage in builders for args in stage.args_of("RUN")]
    wanted = f"pip install -c constraints.txt ./shared ./services/{svc.name}"
    assert any(wanted in run for run in runs), f"no builder RUN does `{wanted}`"
    builder_names = {s.name for s in builders}
    sources = {m.group(1) for args in runtime.args_of("COPY") if (m := re.match(r"--from=(\S+)", args))}
    assert sources & builder_names, "the runtime stage copies nothing from the builder"


@by_service
def test_dockerfile_runs_as_non_root(svc: Service) -> None:
    users = svc.stages()[-1].args_of("USER")
    assert users, "the runtime stage has no USER"
    assert users[-1].split(":")[0] not in {"root", "0"}


@by_service
def test_dockerfile_healthcheck_probes_healthz_with_python(svc: Service) -> None:
    (check,) = svc.stages()[-1].args_of("HEALTHCHECK")
    assert "/healthz" in check
    assert "urllib" in check, "slim images have no curl or wget"
    assert "/opt/venv/fanline-port" in check, "the port comes from the builder's table"


@by_service
def test_dockerfile_knows_each_services_port_variable_and_default(svc: Service) -> None:
    """The builder's table (read by the health check) names the variable the
    service reads its port from, and its default."""
    runs = [args for stage in svc.stages()[:-1] for args in stage.args_of("RUN")]
    (table,) = [run for run in runs if "fanline-port" in run and "case" in run]
    found = re.search(rf"\b{re.escape(svc.name)}\)\s*echo \"(\S+) (\d+)\"", table)
    assert found, f"no {svc.name} entry in the Dockerfile's port table"
    assert found.groups() == (f"FANLINE_{svc.env_prefix}_PORT", str(svc.port))


@by_service
def test_dockerfile_binds_and_starts_the_service(svc: Service) -> None:
    *builders, runtime = svc.stages()
    env = runtime.env()
    assert env.get(f"FANLINE_{svc.env_prefix}_HOST") == "0.0.0.0", "bind all interfaces inside a container"
    assert env.get("PYTHONUNBUFFERED") == "1"
    (entrypoint,) = runtime.args_of("ENTRYPOINT")
    assert json.loads(entrypoint) == ["fanline-service"], "exec form, so signals reach the service"
    runs = [args for stage in builders for args in stage.args_of("RUN")]
    assert any(f"ln -s {svc.script} /opt/venv/bin/fanline-service" in run for run in runs), "fanline-service is the script"
    scripts = tomllib.loads((REPO / "services" / svc.name / "pyproject.toml").read_text())["project"]["scripts"]
    assert svc.script in scripts


@by_service
def test_service_table_matches_the_code(svc: Service) -> None:
    """The ports and variable names used above are the ones the code reads."""
    settings_cls = importlib.import_module(svc.config_module).Settings
    assert settings_cls.from_env({}).http.port == svc.port
    moved = settings_cls.from_env({f"FANLINE_{svc.env_prefix}_HOST": "0.0.0.0", f"FANLINE_{svc.env_prefix}_PORT": "1"})
    assert (moved.http.host, moved.http.port) == ("0.0.0.0", 1)


@pytest.mark.parametrize(
    ("path", "ignored"),
    [
        ("constraints.txt", False),
        ("shared/pyproject.toml", False),
        ("shared/src/fanline_shared/config.py", False),
        ("services/api/pyproject.toml", False),
        ("services/fanout-worker/src/fanline_fanout/app.py", False),
        ("tools/fanline-cli/pyproject.toml", False),  # the api image ships the CLI
        ("tools/capacity_model.py", True),
        (".venv/bin/python", True),
        (".git/HEAD", True),
        (".data/fanline_tweet_store.sqlite3", True),
        ("tests/unit/test_deploy_files.py", True),
        ("shared/src/fanline_shared/__pycache__/config.cpython-311.pyc", True),
        ("services/api/src/fanline_api.egg-info/PKG-INFO", True),
    ],
)
def test_dockerignore_sends_only_what_the_images_install(path: str, ignored: bool) -> None:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
    assert dockerignored(path, patterns) is ignored


# ==========================================================================
# Grafana
# ==========================================================================


@cache
def declared_metric_names() -> frozenset[str]:
    return frozenset(re.findall(r'"(fanline_[a-z0-9_]+)"', METRICS_MODULE.read_text()))


@cache
def provisioned_datasource() -> dict[str, Any]:
    (source,) = sorted((GRAFANA_DIR / "provisioning" / "datasources").glob("*.y*ml"))
    (datasource,) = yaml.safe_load(source.read_text())["datasources"]
    return datasource


def test_grafana_datasource_points_at_the_compose_prometheus() -> None:
    datasource = provisioned_datasource()
    assert datasource["type"] == "prometheus"
    assert datasource["url"] == "http://prometheus:9090"
    assert "prometheus" in compose()["services"]


def test_grafana_dashboard_provider_loads_the_mounted_dashboards() -> None:
    (source,) = sorted((GRAFANA_DIR / "provisioning" / "dashboards").glob("*.y*ml"))
    (provider,) = yaml.safe_load(source.read_text())["providers"]
    assert provider["type"] == "file"
    mounted_at = bind_mounts(compose_service("grafana"))["deploy/grafana/dashboards"]
    assert provider["options"]["path"].rstrip("/") == mounted_at


def test_there_is_an_overview_dashboard() -> None:
    assert (DASHBOARD_DIR / "overview.json").is_file()


@pytest.mark.parametrize("path", dashboards(), ids=lambda p: p.name)
def test_dashboard_panels_all_query_prometheus(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    assert dashboard.get("uid") and dashboard.get("title")
    datasource = provisioned_datasource()
    panels = list(all_panels(dashboard["panels"]))
    assert panels
    for panel in panels:
        title = panel.get("title", panel.get("id"))
        exprs = [t.get("expr", "").strip() for t in panel.get("targets", [])]
        assert exprs and all(exprs), f"panel {title!r} has a target without an expr"
        assert panel["datasource"]["uid"] == datasource["uid"], f"panel {title!r} uses another datasource"


@pytest.mark.parametrize("path", dashboards(), ids=lambda p: p.name)
def test_dashboard_queries_only_metrics_that_exist(path: Path) -> None:
    """Every fanline_* series a panel asks for is declared in fanline_shared.metrics
    (a histogram's _bucket/_sum/_count series included)."""
    exprs = " ".join(t["expr"] for p in all_panels(json.loads(path.read_text())["panels"]) for t in p["targets"])
    declared = declared_metric_names()
    for name in set(re.findall(r"\bfanline_[a-z0-9_]+", exprs)):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in declared or base in declared, f"{path.name} queries {name}, which no service exports"


def test_overview_dashboard_shows_the_key_metrics() -> None:
    dashboard = json.loads((DASHBOARD_DIR / "overview.json").read_text())
    exprs = " ".join(t["expr"] for p in all_panels(dashboard["panels"]) for t in p["targets"])
    missing = [m for m in REQUIRED_DASHBOARD_METRICS if not re.search(rf"\b{m}\b", exprs)]
    assert not missing, f"overview.json does not show {missing}"
    assert "kafka_consumergroup_lag" in exprs, "show the exporter's lag next to the workers' own"


class _Recording(dict[str, str]):
    """An environment that records every variable a settings reader asks for."""

    def __init__(self, values: dict[str, str]) -> None:
        super().__init__(values)
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.read.add(key)
        return super().get(key, default)


def engine_security_variables(tmp_path: Path) -> set[str]:
    """Every variable the engine clients' TLS and authentication read, found
    by reading them fully switched on (SASL_SSL, Cassandra TLS, client
    certificates, passwords): a setting added to engine_security.py is
    covered here without touching this test."""
    from fanline_shared.engine_security import CassandraSecurity, KafkaSecurity

    pem = tmp_path / "any.pem"
    pem.write_text("not read: only its existence is checked")
    values = {"FANLINE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "FANLINE_CASSANDRA_TLS": "true"}
    for engine in ("KAFKA", "CASSANDRA"):
        values |= {f"FANLINE_{engine}_USERNAME": "fanline", f"FANLINE_{engine}_PASSWORD": "secret"}
        values |= {f"FANLINE_{engine}_TLS_{part}": str(pem) for part in ("CA", "CERT", "KEY")}
    env = _Recording(values)
    KafkaSecurity.from_env(Env(env))
    CassandraSecurity.from_env(Env(env))
    return env.read


def test_compose_passes_every_engine_security_setting_through(tmp_path: Path) -> None:
    """Issue #29 item 3, "compose carries the settings": every TLS and
    authentication setting of the engine clients reaches every Fanline
    container from the operator's environment (`${NAME:-default}`), and the
    files they name can be mounted where Kubernetes mounts them."""
    wanted = engine_security_variables(tmp_path)
    assert {"FANLINE_KAFKA_PASSWORD_FILE", "FANLINE_CASSANDRA_TLS_CHECK_HOSTNAME"} <= wanted  # not vacuous
    fanline = {name: svc for name, svc in compose()["services"].items() if str(svc.get("image", "")).startswith("fanline/")}
    assert len(fanline) == 6, sorted(fanline)  # four services and the two migrate jobs
    for name, svc in fanline.items():
        env = environment(svc)
        for variable in sorted(wanted):
            assert re.fullmatch(rf"\$\{{{variable}:-[^}}]*\}}", env.get(variable, "")), f"{name}: {variable} not passed through"
        mounts = [str(v).rsplit(":", 2) for v in svc.get("volumes", [])]
        assert any(m[1:] == ["/etc/fanline/engines", "ro"] for m in mounts), f"{name}: no read-only engines mount"
    readme = REPO / "deploy" / "engines" / "README.md"
    assert "/etc/fanline/engines" in readme.read_text()
    assert (REPO / "deploy" / "engines" / ".gitignore").read_text().splitlines()[1] == "*", "never commit a secret"
