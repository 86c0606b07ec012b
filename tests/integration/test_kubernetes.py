"""deploy/kubernetes/: every resource the kustomization lists passes `kubernetes-validate --strict`
(its schemas are bundled: no cluster, no network), and the numbers that must agree with the
service do: the grace period covers the drain, the probes are the service's, the tokens come from
the Secret as a file, and the feed's ingress neither buffers nor times out a long-poll."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from app.settings import DEFAULTS
from app.settings.server import server_setting
from tests.servers import ROOT

MANIFESTS = ROOT / "deploy" / "kubernetes"


def kustomization() -> dict:
    return yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())


def resources() -> dict[tuple[str, str], dict]:
    """(kind, name) -> document, for every document of every file the kustomization lists."""
    found = {}
    for name in kustomization()["resources"]:
        for document in yaml.safe_load_all((MANIFESTS / name).read_text()):
            found[(document["kind"], document["metadata"]["name"])] = document
    return found


def test_every_resource_passes_kubernetes_validate_strict():
    validate = shutil.which("kubernetes-validate", path=str(Path(sys.executable).parent))
    assert validate, "kubernetes-validate (the test extra) is not installed"
    files = [str(MANIFESTS / name) for name in kustomization()["resources"]]
    done = subprocess.run(
        [validate, "--strict", *files], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ERROR" not in done.stdout + done.stderr
    assert {kind for kind, _ in resources()} == {
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "Ingress",
        "NetworkPolicy",
    }


def test_the_deployment_drains_probes_and_runs_as_the_image_does():
    pod = resources()[("Deployment", "plant-store")]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    graceful = int(server_setting("GUNICORN_GRACEFUL_TIMEOUT"))
    assert pod["terminationGracePeriodSeconds"] > int(pre_stop[1]) + graceful
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    liveness = container["livenessProbe"]
    assert liveness["httpGet"]["path"] == "/healthz"
    # A hung store delays /healthz (it waits its turn behind the plants' requests, 6 s measured):
    # a pod is restarted only after a minute without an answer, not for the store's hang.
    assert liveness["periodSeconds"] * liveness["failureThreshold"] >= 60
    assert liveness["timeoutSeconds"] >= 10
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"requests", "limits"} <= set(container["resources"])
    # The Containerfile's user, and its one writable place mounted.
    assert f"USER {pod['securityContext']['runAsUser']}:" in (ROOT / "Containerfile").read_text()
    assert any(mount["mountPath"] == "/tmp" for mount in container["volumeMounts"])  # noqa: S108 - the pod's path


def test_the_tokens_come_from_the_secret_as_a_file():
    pod = resources()[("Deployment", "plant-store")]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {item["name"]: item["value"] for item in container["env"]}
    assert "PLANTS_API_TOKENS" not in env
    tokens = Path(env["PLANTS_API_TOKENS_FILE"])
    (mount,) = [m for m in container["volumeMounts"] if Path(m["mountPath"]) == tokens.parent]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    (generated,) = [
        s for s in kustomization()["secretGenerator"] if s["name"] == volume["secret"]["secretName"]
    ]
    assert tokens.name in generated["files"]
    # The generated secrets' files are never committed.
    assert tokens.name in (MANIFESTS / ".gitignore").read_text().split()


def test_the_feeds_ingress_streams_unbuffered_past_a_long_poll():
    events = resources()[("Ingress", "plant-store-events")]
    annotations = events["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    read_timeout = int(annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"])
    assert read_timeout > DEFAULTS["PLANTS_EVENTS_MAX_WAIT"]
    assert read_timeout > DEFAULTS["PLANTS_EVENTS_HEARTBEAT"]
    (path,) = events["spec"]["rules"][0]["http"]["paths"]
    assert (path["path"], path["pathType"]) == ("/events", "Exact")


def test_every_ingress_sets_the_forwarded_prefix_the_pods_trust():
    """ingress-nginx passes a client's X-Forwarded-Prefix on unless the Ingress sets it; the pods
    trust it (PLANTS_TRUSTED_PROXIES=1), and it moves every URL the service hands out."""
    ingresses = [body for (kind, _), body in resources().items() if kind == "Ingress"]
    assert len(ingresses) == 2
    for ingress in ingresses:
        assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/x-forwarded-prefix"] == "/"


def test_only_the_ingress_controller_reaches_the_pods():
    """The pods trust their peer's X-Forwarded-For (PLANTS_TRUSTED_PROXIES=1), so the only peer
    admitted is the ingress controller, on the service's port."""
    pod = resources()[("Deployment", "plant-store")]["spec"]["template"]
    env = {item["name"]: item["value"] for item in pod["spec"]["containers"][0]["env"]}
    assert env["PLANTS_TRUSTED_PROXIES"] == "1"
    policy = resources()[("NetworkPolicy", "plant-store")]["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert "Ingress" in policy["policyTypes"]
    (rule,) = policy["ingress"]
    (peer,) = rule["from"]
    assert set(peer) == {"namespaceSelector", "podSelector"}  # both: the controller's pods only
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "ingress-nginx"}
    assert peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "controller"
    (port,) = rule["ports"]
    assert port["port"] in {p["name"] for p in pod["spec"]["containers"][0]["ports"]}
