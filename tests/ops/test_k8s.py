"""deploy/k8s, validated offline: rendered with kustomize, checked by
kubeconform -strict against bundled schemas and every pod against its
namespace's Pod Security Standard (``psa-check``: the API server's own
evaluator, tests/ops/psa), then the rules a schema cannot express (probes,
resources, PodDisruptionBudgets, KEDA's bounds, Jobs, consistency with the
config), and the operator CLI's Job as deploy/k8s/tools/fanline-cli renders it.

Schemas (tests/ops/data/k8s-schemas/README.md): the built-in kinds come from
the pinned ``kubernetes-validate`` package (PyPI), turned into standalone
files here at run time; KEDA's ScaledObject is the vendored, generated
``scaledobject-keda-v1alpha1.json``. kubeconform never touches the network:
it is given only a local ``-schema-location``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.parse
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from .support import REPO, run_tool, tool

K8S = REPO / "deploy" / "k8s"
OVERLAYS = ("base", "overlays/dev", "overlays/production")
KUBERNETES_VERSION = "1.31.0"  # the oldest minor we support; manifests valid here stay valid later
VENDORED_SCHEMAS = Path(__file__).parent / "data" / "k8s-schemas"
SERVICES = {"api": 8000, "social-graph": 8001, "tweet-store": 8002, "fanout-worker": 8003}
STORAGE = ("social-graph", "tweet-store")
DEF_REF = "/api/_definitions.json#/$defs/"


# --------------------------------------------------------------------------
# rendering and schemas
# --------------------------------------------------------------------------


@cache
def rendered(overlay: str) -> str:
    done = run_tool([tool("kustomize"), "build", str(K8S / overlay)], timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@cache
def objects(overlay: str) -> tuple[dict[str, Any], ...]:
    return tuple(doc for doc in yaml.safe_load_all(rendered(overlay)) if doc)


def kind_file(api_version: str, kind: str) -> str:
    """kubeconform's default name: {{ .ResourceKind }}{{ .KindSuffix }}.json."""
    group, _, version = api_version.rpartition("/")
    suffix = f"-{group.split('.')[0]}-{version}" if group else f"-{version}"
    return f"{kind.lower()}{suffix}.json"


def standalone(schema: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """One kubernetes-validate schema with the definitions it needs inlined
    (kubeconform cannot follow the shared /api/_definitions.json)."""
    text = json.dumps(schema).replace(DEF_REF, "#/$defs/")
    needed: set[str] = set()
    pending = set(re.findall(r'"#/\$defs/([^"]+)"', text))
    while pending:
        name = pending.pop()
        if name in needed:
            continue
        needed.add(name)
        pending |= set(re.findall(r'"#/\$defs/([^"]+)"', json.dumps(definitions[name]))) - needed
    out = json.loads(text)
    out.pop("$id", None)
    out["$defs"] = {name: definitions[name] for name in sorted(needed)}
    return out


@pytest.fixture(scope="module")
def schema_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import kubernetes_validate

    source = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{KUBERNETES_VERSION}-local-strict"
    assert source.is_dir(), f"kubernetes-validate has no schemas for {KUBERNETES_VERSION}"
    definitions = json.loads((source / "_definitions.json").read_text())["$defs"]
    out = tmp_path_factory.mktemp("k8s-schemas")
    wanted = {kind_file(o["apiVersion"], o["kind"]) for overlay in OVERLAYS for o in objects(overlay)}
    wanted |= {"deployment-apps-v1.json"}  # used by the negative test
    for name in sorted(wanted):
        vendored = VENDORED_SCHEMAS / name
        if vendored.exists():
            (out / name).write_text(vendored.read_text())
            continue
        assert (source / name).exists(), f"no Kubernetes {KUBERNETES_VERSION} schema {name}"
        (out / name).write_text(json.dumps(standalone(json.loads((source / name).read_text()), definitions)))
    return out


def kubeconform(manifests: str, schemas: Path) -> tuple[int, list[dict[str, Any]], str]:
    done = run_tool(
        [
            tool("kubeconform"),
            "-strict",
            "-summary",
            "-output",
            "json",
            "-schema-location",
            str(schemas / "{{ .ResourceKind }}{{ .KindSuffix }}.json"),
            "-",
        ],
        input=manifests,
        timeout=120,
    )
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        return done.returncode, [], done.stdout + done.stderr
    return done.returncode, report.get("resources", []), json.dumps(report.get("summary", {}))


# --------------------------------------------------------------------------
# schema validation
# --------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kustomize_renders_and_kubeconform_accepts(overlay: str, schema_dir: Path) -> None:
    code, resources, summary = kubeconform(rendered(overlay), schema_dir)
    problems = [f"{r['kind']}/{r['name']}: {r['status']} {r.get('msg', '')}" for r in resources if r["status"] != "statusValid"]
    assert code == 0 and not problems, "\n".join(problems) or summary
    assert json.loads(summary)["valid"] == len(objects(overlay)), summary


BROKEN = {
    "misspelt-deployment-field": """
apiVersion: apps/v1
kind: Deployment
metadata: {name: x}
spec:
  replica: 2
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec: {containers: [{name: x, image: x}]}
""",
    "probe-port-of-wrong-type": """
apiVersion: v1
kind: Service
metadata: {name: x}
spec:
  ports: [{port: "eighty"}]
""",
    "keda-metadata-must-be-strings": """
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: x}
spec:
  scaleTargetRef: {name: x}
  triggers: [{type: kafka, metadata: {lagThreshold: 100}}]
""",
    "keda-unknown-field": """
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: x}
spec:
  scaleTargetRef: {name: x}
  maxReplicas: 8
  triggers: [{type: kafka, metadata: {topic: t}}]
""",
}


@pytest.mark.parametrize("manifest", BROKEN.values(), ids=BROKEN.keys())
def test_validation_is_not_vacuous(manifest: str, schema_dir: Path) -> None:
    code, resources, output = kubeconform(manifest, schema_dir)
    assert code != 0, output
    assert resources and resources[0]["status"] == "statusInvalid", (resources, output)


# --------------------------------------------------------------------------
# what a schema cannot say
# --------------------------------------------------------------------------


def by_kind(overlay: str, kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects(overlay) if o["kind"] == kind}


def config(overlay: str) -> dict[str, str]:
    return dict(by_kind(overlay, "ConfigMap")["fanline-config"]["data"])


def container(obj: dict[str, Any]) -> dict[str, Any]:
    (only,) = obj["spec"]["template"]["spec"]["containers"]
    return dict(only)


by_overlay = pytest.mark.parametrize("overlay", OVERLAYS)


@by_overlay
def test_every_service_is_a_deployment_with_a_service(overlay: str) -> None:
    deployments, services = by_kind(overlay, "Deployment"), by_kind(overlay, "Service")
    for name, port in SERVICES.items():
        deployment = deployments[name]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
        c = container(deployment)
        assert c["image"].split("/")[-1].startswith(f"{name}:"), c["image"]
        metrics = port + METRICS_PORT_OFFSET
        assert c["ports"] == [{"name": "http", "containerPort": port}, {"name": "metrics", "containerPort": metrics}]
        service = services[name]
        assert service["spec"]["selector"].items() <= labels.items(), f"service {name} selects no pod"
        ports = [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]]
        # The worker's headless Service lists each replica for Prometheus' DNS discovery.
        assert ports == ([(port, "http"), (metrics, "metrics")] if name == "fanout-worker" else [(port, "http")]), name


@by_overlay
def test_probes_resources_and_hardening(overlay: str) -> None:
    for name in SERVICES:
        deployment = by_kind(overlay, "Deployment")[name]
        c = container(deployment)
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}, name
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}, name
        assert c["startupProbe"]["httpGet"]["path"] == "/healthz", name
        for bound in ("requests", "limits"):
            assert set(c["resources"][bound]) == {"cpu", "memory"}, f"{name}: {bound}"
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 10001, "the Dockerfiles' fanline user"
        assert c["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }
        assert {"configMapRef": {"name": "fanline-config"}} in c["envFrom"]
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/port"] == str(SERVICES[name] + METRICS_PORT_OFFSET), "the metrics port"


@by_overlay
def test_secrets_go_where_they_are_needed(overlay: str) -> None:
    """The api alone gets the cursor secret; every service gets the internal
    credential (FANLINE_INTERNAL_TOKEN), and so do the migrate Jobs."""
    deployments = by_kind(overlay, "Deployment")
    assert {"secretRef": {"name": "fanline-secrets"}} in container(deployments["api"])["envFrom"]
    for name in SERVICES:
        refs = container(deployments[name])["envFrom"]
        assert {"secretRef": {"name": "fanline-internal"}} in refs, name
        if name != "api":
            assert {"secretRef": {"name": "fanline-secrets"}} not in refs, f"{name} does not need the cursor secret"
    for job in by_kind(overlay, "Job").values():
        if job["metadata"]["name"].startswith("migrate-"):
            assert {"secretRef": {"name": "fanline-internal"}} in container(job)["envFrom"]


def test_only_the_dev_overlay_ships_secrets_and_production_refuses_placeholders() -> None:
    dev = by_kind("overlays/dev", "Secret")
    assert set(dev["fanline-secrets"]["stringData"]) == {"FANLINE_CURSOR_SECRET"}
    assert set(dev["fanline-internal"]["stringData"]) == {"FANLINE_INTERNAL_TOKEN"}
    assert not by_kind("base", "Secret"), "the base must not carry a Secret an overlay could inherit"
    assert not by_kind("overlays/production", "Secret"), "production secrets come from the secret store"
    assert config("overlays/production")["FANLINE_ENV"] == "production"
    assert "FANLINE_ENV" not in config("overlays/dev")


# --------------------------------------------------------------------------
# network policy, derived from the code's own call paths (issue #29 item 2)
# --------------------------------------------------------------------------

# Every composition root that constructs peer clients: its module (where it
# declares PEERS) and its package's source (what it really constructs).
ROOTS = {
    "api": ("fanline_api.app", REPO / "services" / "api" / "src" / "fanline_api"),
    "fanout-worker": ("fanline_fanout.app", REPO / "services" / "fanout-worker" / "src" / "fanline_fanout"),
    "tweet-store": ("fanline_tweet_store.app", REPO / "services" / "tweet-store" / "src" / "fanline_tweet_store"),
    "social-graph": ("fanline_social_graph.app", REPO / "services" / "social-graph" / "src" / "fanline_social_graph"),
    "cli": ("fanline_cli.rebuild", REPO / "tools" / "fanline-cli" / "src" / "fanline_cli"),
}
# How a caller's pods are told apart: the services by name, the operators'
# CLI by the label docs/operations.md asks for.
INTERNAL_CLIENT = {"podSelector": {"matchLabels": {"fanline/internal-client": "true"}}}
PROMETHEUS = {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
INGRESS_CONTROLLER = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}
METRICS_PORT_OFFSET = 50


def declared_peers() -> dict[str, tuple[str, ...]]:
    import importlib

    return {root: tuple(importlib.import_module(module).PEERS) for root, (module, _) in ROOTS.items()}


def peer_clients() -> dict[str, str]:
    """Every typed peer client in ``fanline_shared.clients`` (one module per
    owner), by class name, mapped to its peer by the class itself: a client
    added there is covered without touching this test."""
    import importlib
    import inspect
    import pkgutil

    from fanline_shared import clients
    from fanline_shared.http_client import PeerClient

    found: dict[str, str] = {}
    for info in pkgutil.iter_modules(clients.__path__):
        module = importlib.import_module(f"{clients.__name__}.{info.name}")
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, PeerClient) and cls is not PeerClient and cls.__module__ == module.__name__:
                found[name] = cls("probe", "http://127.0.0.1:9", 1.0)._peer
    return found


def test_the_peer_clients_are_found() -> None:
    assert peer_clients() == {"SocialGraphClient": "social-graph", "TweetStoreClient": "tweet-store"}


def constructed_peers(package: Path) -> set[str]:
    """The peers a package's source constructs clients for: every call of a
    peer client class, the class mapped to its peer by the class itself."""
    import ast

    clients = peer_clients()
    found: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if name in clients:
                found.add(clients[name])
            elif name == "PeerClient":
                peer = node.args[1] if len(node.args) > 1 else None
                assert isinstance(peer, ast.Constant), f"{path}: PeerClient with a peer that is not a literal"
                found.add(str(peer.value))
    return found


def callers_of(service: str) -> list[str]:
    return sorted(root for root, peers in declared_peers().items() if service in peers)


def expected_ingress(service: str) -> list[dict[str, Any]]:
    """The rules a service's policy must have, from its callers in the code."""
    port = SERVICES[service]
    rules: list[dict[str, Any]] = []
    callers = callers_of(service)
    if service == "api":  # the public gateway: its callers are the Ingress controller's pods
        rules.append({"from": [INGRESS_CONTROLLER], "ports": [{"protocol": "TCP", "port": port}]})
    elif callers:
        sources: list[dict[str, Any]] = []
        services = [c for c in callers if c != "cli"]
        if services:
            sources.append(
                {"podSelector": {"matchExpressions": [{"key": "app.kubernetes.io/name", "operator": "In", "values": services}]}}
            )
        if "cli" in callers:
            sources.append(INTERNAL_CLIENT)
        rules.append({"from": sources, "ports": [{"protocol": "TCP", "port": port}]})
    rules.append({"from": [PROMETHEUS], "ports": [{"protocol": "TCP", "port": port + METRICS_PORT_OFFSET}]})
    return rules


def test_every_composition_root_declares_exactly_the_peers_it_constructs_clients_for() -> None:
    declared = declared_peers()
    for root, (_, package) in ROOTS.items():
        assert constructed_peers(package) == set(declared[root]), f"{root}: PEERS does not match the clients it constructs"
    # The call path the review found missing: tweet-store reads whom a reader follows.
    assert callers_of("social-graph") == ["api", "cli", "fanout-worker", "tweet-store"]
    assert callers_of("tweet-store") == ["api", "cli", "fanout-worker"]


@by_overlay
def test_network_policies_admit_every_call_path_of_the_code_and_nothing_else(overlay: str) -> None:
    policies = by_kind(overlay, "NetworkPolicy")
    for service in SERVICES:
        selecting = [
            p for p in policies.values() if p["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": service}}
        ]
        assert len(selecting) == 1, f"{service}: {len(selecting)} policies select it (want one, so all else is refused)"
        (policy,) = selecting
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        assert policy["spec"]["ingress"] == expected_ingress(service), service
    # The gateway's rate-limit counters (RateLimitSettings reads FANLINE_RATE_LIMIT_STORAGE): its only caller.
    storage = urllib.parse.urlsplit(config(overlay)["FANLINE_RATE_LIMIT_STORAGE"])
    (redis,) = [
        p for p in policies.values() if p["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": storage.hostname}}
    ]
    assert redis["spec"]["ingress"] == [
        {
            "from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "api"}}}],
            "ports": [{"protocol": "TCP", "port": storage.port}],
        }
    ]
    # Every workload of Fanline is selected by a policy: nothing is reachable by default.
    selected = {p["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"] for p in policies.values()}
    workloads = {
        d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] for d in by_kind("base", "Deployment").values()
    }
    assert workloads <= selected, workloads - selected


@by_overlay
def test_metrics_ports_are_in_no_service_the_ingress_routes_to(overlay: str) -> None:
    services = by_kind(overlay, "Service")
    for ingress in by_kind(overlay, "Ingress").values():
        for rule in ingress["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                backend = path["backend"]["service"]
                target = services[backend["name"]]
                (port,) = [p for p in target["spec"]["ports"] if p["name"] == backend["port"].get("name")]
                assert port["targetPort"] == "http", (ingress["metadata"]["name"], port)
    assert [p["name"] for p in services["api"]["spec"]["ports"]] == ["http"], "the api Service carries no metrics port"


@by_overlay
def test_keda_scales_the_worker_within_the_partitions(overlay: str) -> None:
    worker = by_kind(overlay, "Deployment")["fanout-worker"]
    assert "replicas" not in worker["spec"], "KEDA owns the replica count"
    (scaled,) = by_kind(overlay, "ScaledObject").values()
    spec = scaled["spec"]
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert spec["scaleTargetRef"]["name"] == "fanout-worker"
    settings = config(overlay)
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"] <= int(settings["FANLINE_TOPIC_PARTITIONS"])
    (trigger,) = spec["triggers"]
    meta = trigger["metadata"]
    assert trigger["type"] == "kafka"
    assert meta["consumerGroup"] == settings["FANLINE_WORKER_GROUP"] == "fanline-fanout"
    assert meta["topic"] == settings["FANLINE_EVENTS_TOPIC"]
    assert meta["bootstrapServers"] == settings["FANLINE_KAFKA_BOOTSTRAP"], "KEDA must watch the same Kafka"
    assert int(meta["lagThreshold"]) > 0
    assert meta["allowIdleConsumers"] == "false"


def released_version() -> str:
    match = re.search(r"^## \[(\d+\.\d+\.\d+)\]", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert match
    return match.group(1)


def jobs_by_app(overlay: str) -> dict[str, dict[str, Any]]:
    return {j["metadata"]["labels"]["app.kubernetes.io/name"]: j for j in by_kind(overlay, "Job").values()}


@by_overlay
def test_jobs_migrate_both_keyspaces_and_create_the_topics(overlay: str) -> None:
    jobs, deployments = jobs_by_app(overlay), by_kind(overlay, "Deployment")
    for service in STORAGE:
        job = jobs[f"migrate-{service}"]
        c = container(job)
        assert c["args"] == ["migrate"]
        assert c["image"] == container(deployments[service])["image"], "the service's own image and code path"
        assert job["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
        assert job["spec"]["parallelism"] == 1, "one migrator at a time, retries included"
        assert job["spec"]["ttlSecondsAfterFinished"] > 0
    script = " ".join(container(jobs["kafka-topics"])["args"])
    for needle in (
        '"$FANLINE_EVENTS_TOPIC"',
        '"$FANLINE_DLQ_TOPIC"',
        '"$FANLINE_CHUNKS_TOPIC"',
        '--partitions "$FANLINE_TOPIC_PARTITIONS"',
        "--if-not-exists",
        # Durability: set on creation, raised on topics that exist (issue #29 item 5) ...
        '--config min.insync.replicas="$min_isr"',
        '--alter --entity-type topics --entity-name "$topic" --add-config min.insync.replicas="$min_isr"',
        # ... through the services' own TLS/SASL settings.
        '--command-config "$props"',
        "FANLINE_KAFKA_SECURITY_PROTOCOL",
    ):
        assert needle in script, needle
    assert script.count("--bootstrap-server") == script.count('--command-config "$props"'), "every call secured"


@by_overlay
def test_config_keys_are_documented_settings(overlay: str) -> None:
    """A misspelt variable would be silently ignored by the services."""
    documented = set(re.findall(r"`(FANLINE_[A-Z0-9_]+)`", (REPO / "README.md").read_text()))
    unknown = set(config(overlay)) - documented
    assert not unknown, f"not settings of any service (README.md, Configuration): {unknown}"
    partitions = int(config(overlay)["FANLINE_TOPIC_PARTITIONS"])
    assert partitions >= 8


@by_overlay
def test_everything_lives_in_the_fanline_namespace(overlay: str) -> None:
    for obj in objects(overlay):
        if obj["kind"] == "Namespace":
            assert obj["metadata"]["name"] == "fanline"
        else:
            assert obj["metadata"].get("namespace") == "fanline", f"{obj['kind']}/{obj['metadata']['name']}"
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "fanline"


def test_the_dev_overlay_runs_the_engines_and_production_does_not() -> None:
    dev = by_kind("overlays/dev", "StatefulSet")
    assert set(dev) == {"kafka", "cassandra"}
    assert {"kafka", "cassandra"} <= set(by_kind("overlays/dev", "Service"))
    assert not by_kind("overlays/production", "StatefulSet")
    production = config("overlays/production")
    assert production["FANLINE_CASSANDRA_RF"] == production["FANLINE_TOPIC_RF"] == "3"


def test_production_turns_on_tls_and_auth_to_both_engines_with_files_every_pod_mounts(tmp_path: Path) -> None:
    """Issue #29 item 3, "Kubernetes carries the settings": the production
    overlay's ConfigMap, read by the services' own settings readers, asks for
    SASL_SSL (SCRAM-SHA-512) and Cassandra TLS with a password; every file it
    names lies in a Secret volume mounted in every container that reads the
    ConfigMap, under a key the overlay's `kubectl create secret` line
    creates."""
    from fanline_shared.config import Env
    from fanline_shared.engine_security import CassandraSecurity, KafkaSecurity

    production = config("overlays/production")
    files = {name: value for name, value in production.items() if name.endswith(("_FILE", "_CA", "_CERT", "_KEY"))}
    assert {"FANLINE_KAFKA_PASSWORD_FILE", "FANLINE_CASSANDRA_PASSWORD_FILE", "FANLINE_KAFKA_TLS_CA"} <= set(files)
    comment = (K8S / "overlays" / "production" / "kustomization.yaml").read_text()
    created = set(re.findall(r"--from-(?:literal|file)=([\w.-]+)=", comment))
    pods = [*by_kind("overlays/production", "Deployment").values(), *by_kind("overlays/production", "Job").values()]
    pods = [p for p in pods if {"configMapRef": {"name": "fanline-config"}} in container(p).get("envFrom", [])]
    assert len(pods) >= 7, [p["metadata"]["name"] for p in pods]  # four services, two migrations, the topics Job
    for pod in pods:
        spec = pod["spec"]["template"]["spec"]
        secrets = {v["name"]: v["secret"]["secretName"] for v in spec.get("volumes", []) if "secret" in v}
        mounts = {m["mountPath"]: m["name"] for m in container(pod).get("volumeMounts", [])}
        for name, path in files.items():
            directory, _, key = path.rpartition("/")
            assert mounts.get(directory) in secrets, f"{pod['metadata']['name']}: {name}={path} is in no mounted Secret"
            assert key in created, f"{name}: the Secret key {key} is not created by the overlay's instructions"
    # The settings the services would read from it (the mounted files stood in for by local ones).
    for path in files.values():
        local = tmp_path / path.lstrip("/")
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text("stand-in")
    env = Env({name: str(tmp_path / value.lstrip("/")) if name in files else value for name, value in production.items()})
    kafka, cassandra = KafkaSecurity.from_env(env), CassandraSecurity.from_env(env)
    assert (kafka.protocol, kafka.sasl_mechanism, kafka.username) == ("SASL_SSL", "SCRAM-SHA-512", "fanline")
    assert kafka.password is not None and kafka.tls is not None and kafka.tls.check_hostname
    assert cassandra.tls is not None and cassandra.tls.ca_file is not None and cassandra.tls.check_hostname
    assert cassandra.username == "fanline" and cassandra.password is not None


# --------------------------------------------------------------------------
# Pod Security Standards (the API server's own evaluator: tests/ops/psa)
# --------------------------------------------------------------------------


def psa_check(manifests: str, level: str) -> tuple[int, list[dict[str, Any]], str]:
    done = run_tool([tool("psa-check"), "-level", level], input=manifests, timeout=60)
    verdicts = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return done.returncode, verdicts, done.stderr


def enforced_level(overlay: str) -> str:
    (namespace,) = by_kind(overlay, "Namespace").values()
    return str(namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"])


@by_overlay
def test_every_pod_passes_the_namespace_pod_security_standard(overlay: str) -> None:
    level = enforced_level(overlay)
    assert level == ("baseline" if overlay == "overlays/dev" else "restricted"), "only the dev overlay relaxes it"
    code, verdicts, err = psa_check(rendered(overlay), level)
    assert code == 0, [v for v in verdicts if not v["allowed"]] or err
    workloads = {(o["kind"], o["metadata"]["name"]) for o in objects(overlay) if "template" in o.get("spec", {})}
    assert {(v["kind"], v["name"]) for v in verdicts} == workloads, "psa-check skipped a workload"


def test_the_fanline_pods_pass_restricted_even_in_the_dev_overlay() -> None:
    """The dev overlay relaxes the namespace for the cassandra image only."""
    _, verdicts, _ = psa_check(rendered("overlays/dev"), "restricted")
    refused = {v["name"] for v in verdicts if not v["allowed"]}
    assert refused == {"cassandra"}, refused


def test_the_pod_security_check_is_not_vacuous() -> None:
    code, verdicts, _ = psa_check(BROKEN["misspelt-deployment-field"], "restricted")
    assert code == 1 and verdicts and not verdicts[0]["allowed"]
    reasons = " ".join(f["reason"] for f in verdicts[0]["forbidden"])
    assert "runAsNonRoot" in reasons and "seccompProfile" in reasons, reasons


# --------------------------------------------------------------------------
# PodDisruptionBudgets
# --------------------------------------------------------------------------


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) == {"matchLabels"}, "only matchLabels selectors here"
    return bool(selector["matchLabels"].items() <= labels.items())


@by_overlay
def test_every_deployment_has_one_disruption_budget_that_lets_a_drain_proceed(overlay: str) -> None:
    budgets = by_kind(overlay, "PodDisruptionBudget")
    for name, deployment in by_kind(overlay, "Deployment").items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        mine = [b for b in budgets.values() if selects(b["spec"]["selector"], labels)]
        assert len(mine) == 1, f"{name}: {len(mine)} PodDisruptionBudgets select its pods"
        spec = mine[0]["spec"]
        # maxUnavailable 1: one replica at a time, and a single replica can still be drained.
        assert spec == {"maxUnavailable": 1, "selector": spec["selector"]}, spec
    for budget in budgets.values():
        owners = [
            n
            for n, d in by_kind(overlay, "Deployment").items()
            if selects(budget["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])
        ]
        assert len(owners) == 1, f"PodDisruptionBudget {budget['metadata']['name']} selects {owners}"


# --------------------------------------------------------------------------
# the operator CLI as a Job (deploy/k8s/tools)
# --------------------------------------------------------------------------

CLI_SCRIPT = K8S / "tools" / "fanline-cli"


def cli_job(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_tool([str(CLI_SCRIPT), *args], env={"PATH": os.environ["PATH"], **env}, timeout=30)


@pytest.mark.parametrize("claim", ["", "fanline-backups"])
def test_the_cli_job_is_valid_and_passes_restricted(schema_dir: Path, claim: str) -> None:
    done = cli_job("--print", "backup", "/backups/2026-11-26", BACKUP_CLAIM=claim)
    assert done.returncode == 0, done.stderr
    (job,) = [d for d in yaml.safe_load_all(done.stdout) if d]
    (backups,) = [v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "backups"]
    assert backups == (
        {"name": "backups", "persistentVolumeClaim": {"claimName": claim}} if claim else {"name": "backups", "emptyDir": {}}
    )
    code, resources, summary = kubeconform(done.stdout, schema_dir)
    assert code == 0 and not resources and json.loads(summary)["valid"] == 1, (resources, summary)
    code, verdicts, err = psa_check(done.stdout, "restricted")
    assert code == 0 and len(verdicts) == 1 and verdicts[0]["allowed"], verdicts or err


def test_the_cli_job_runs_the_cli_with_what_internal_calls_need() -> None:
    (job,) = [d for d in yaml.safe_load_all(cli_job("--print", "rebuild-home", "ada").stdout) if d]
    pod = job["spec"]["template"]
    c = container(job)
    assert c["command"] == ["fanline"] and c["args"] == ["rebuild-home", "ada"]
    assert c["image"].split(":")[0] == container(by_kind("base", "Deployment")["api"])["image"].split(":")[0], "the api image"
    assert {"configMapRef": {"name": "fanline-config"}} in c["envFrom"]
    assert {"secretRef": {"name": "fanline-internal"}} in c["envFrom"]
    assert job["metadata"]["namespace"] == "fanline" and "generateName" in job["metadata"]
    assert job["spec"]["backoffLimit"] == 0 and pod["spec"]["restartPolicy"] == "Never"
    assert job["spec"]["ttlSecondsAfterFinished"] > 0
    # the NetworkPolicies of the services the CLI calls (the storage services) admit it
    called = [service for service in SERVICES if "cli" in callers_of(service)]
    assert called == ["social-graph", "tweet-store"], called
    for service in called:
        (policy,) = [
            p
            for p in by_kind("base", "NetworkPolicy").values()
            if p["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": service}}
        ]
        sources = [source for rule in policy["spec"]["ingress"] for source in rule.get("from", [])]
        assert any(
            set(s) == {"podSelector"}
            and "matchLabels" in s["podSelector"]
            and selects(s["podSelector"], pod["metadata"]["labels"])
            for s in sources
        ), policy["metadata"]["name"]
    # ...and the image it names ships the CLI
    from .test_images import image_installs

    assert "./tools/fanline-cli" in image_installs("fanline/api")


def test_the_cli_job_takes_the_namespace_and_image_and_refuses_unsafe_arguments() -> None:
    (job,) = [
        d
        for d in yaml.safe_load_all(cli_job("--print", "topics", "verify", NAMESPACE="staging", IMAGE="r.example/api:9").stdout)
        if d
    ]
    assert job["metadata"]["namespace"] == "staging" and container(job)["image"] == "r.example/api:9"
    for bad in ("a b", 'x"y', "$(id)", ""):
        done = cli_job("--print", "rebuild-home", bad)
        assert done.returncode == 2 and "unsupported" in done.stderr, (bad, done.stderr)


FAKE_KUBECTL = """#!/usr/bin/env bash
# Records its calls; answers like kubectl for the script's four calls.
echo "$*" >> "$CALLS"
case "$*" in
  *"get deployment api"*) printf 'registry.example/fanline/api:0.2.0' ;;
  *"create -f - -o name"*) cat > "$CREATED"; echo job.batch/fanline-cli-x7k2p ;;
  *"logs -f"*) echo "fanline.events: 8 partitions, ok" ;;
  *"get pods -l job-name=fanline-cli-x7k2p"*) printf '%s' "$EXIT_CODE" ;;
esac
"""


@pytest.mark.parametrize("exit_code", ["0", "1"])
def test_the_cli_script_creates_the_job_follows_its_log_and_returns_its_exit_code(tmp_path: Path, exit_code: str) -> None:
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(FAKE_KUBECTL)
    kubectl.chmod(0o755)
    calls, created = tmp_path / "calls", tmp_path / "job.yaml"
    done = cli_job("topics", "verify", KUBECTL=str(kubectl), CALLS=str(calls), CREATED=str(created), EXIT_CODE=exit_code)
    assert done.returncode == int(exit_code), done.stderr
    assert "8 partitions" in done.stdout
    (job,) = [d for d in yaml.safe_load_all(created.read_text()) if d]
    assert container(job)["image"] == "registry.example/fanline/api:0.2.0", "the image the api Deployment runs"
    assert container(job)["args"] == ["topics", "verify"]
    assert [line.split()[2] for line in calls.read_text().splitlines()] == ["get", "create", "logs", "get"]


@by_overlay
def test_jobs_are_named_after_the_release_and_the_services_never_migrate(overlay: str) -> None:
    """A new release's Jobs are new objects (a finished Job's spec cannot
    change), and the services only wait for the schema the Jobs bring."""
    suffix = "-" + released_version().replace(".", "-")
    for app, job in jobs_by_app(overlay).items():
        assert job["metadata"]["name"] == app + suffix, job["metadata"]["name"]
    assert config(overlay)["FANLINE_SCHEMA_AT_START"] == "wait"
