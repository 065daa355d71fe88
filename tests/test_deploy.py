"""The deployment files: docker-compose.yml checked by Docker Compose v2 itself (`config`, which needs
no engine), the Dockerfiles by hadolint, and the Helm chart linted and rendered by helm (fetched by
`make deploy-tools`, which `make test` runs) with every manifest checked against the Kubernetes
OpenAPI schemas (kubernetes-validate, offline). No Docker engine or cluster is involved."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import compose
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = Path(compose.__file__).parent / "docker-compose"  # the Go binary (its Python wrapper drops the exit code)
HELM = ROOT / "deploy" / "tools" / "bin" / "helm"
CHART = ROOT / "deploy" / "helm" / "rlplane"
K8S_VERSIONS = ("1.27.0", "1.37.0")  # the oldest the chart allows (kubeVersion) and the newest schemas shipped
SECRETS = {
    "POSTGRES_PASSWORD": "pg-secret",
    "REDIS_PASSWORD": "redis-secret",
    "RLPLANE_BOOTSTRAP_TOKEN": "0123456789abcdef0123456789abcdef",
    "RLPLANE_WORKER_TOKEN": "rlp_worker-token",
}


def _compose(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in SECRETS and not k.startswith("COMPOSE_")}
    command = [str(COMPOSE), "--project-directory", str(ROOT), "-f", str(ROOT / "docker-compose.yml"), *args]
    return subprocess.run(command, env={**clean, **env}, capture_output=True, text=True, timeout=60)


class TestCompose:
    def test_the_full_file_with_every_profile_is_valid(self):
        result = _compose(
            SECRETS, "--env-file", "/dev/null", "--profile", "cpu", "--profile", "gpu", "config", "--format", "json"
        )
        assert result.returncode == 0, result.stderr
        project = yaml.safe_load(result.stdout)
        services = project["services"]
        assert set(services) == {"postgres", "redis", "api", "worker-cpu", "worker-gpu"}
        for name, service in services.items():
            assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
        assert {"pgdata", "artifacts"} <= set(project["volumes"])
        [device] = services["worker-gpu"]["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
        assert services["worker-gpu"]["profiles"] == ["gpu"]
        api_env = services["api"]["environment"]
        assert api_env["RLPLANE_BOOTSTRAP_TOKEN"] == SECRETS["RLPLANE_BOOTSTRAP_TOKEN"]
        assert "pg-secret@postgres" in api_env["RLPLANE_DATABASE_URL"]
        assert "RLPLANE_DATABASE_URL" not in services["worker-gpu"]["environment"]  # workers never see the database
        assert services["worker-cpu"]["environment"]["RLPLANE_TOKEN"] == SECRETS["RLPLANE_WORKER_TOKEN"]
        assert services["api"]["depends_on"]["postgres"]["condition"] == "service_healthy"

    def test_the_first_start_needs_no_worker_token_and_starts_no_worker(self):
        env = {k: v for k, v in SECRETS.items() if k != "RLPLANE_WORKER_TOKEN"}
        result = _compose(env, "--env-file", "/dev/null", "config", "--services")
        assert result.returncode == 0, result.stderr
        assert sorted(result.stdout.split()) == ["api", "postgres", "redis"]

    @pytest.mark.parametrize("missing", ["POSTGRES_PASSWORD", "REDIS_PASSWORD", "RLPLANE_BOOTSTRAP_TOKEN"])
    def test_a_missing_secret_is_refused_not_defaulted(self, missing):
        env = {k: v for k, v in SECRETS.items() if k != missing}
        result = _compose(env, "--env-file", "/dev/null", "config", "-q")
        assert result.returncode != 0 and f"required variable {missing} is missing" in result.stderr

    def test_env_example_documents_every_variable_and_sets_no_secret(self):
        example = (ROOT / ".env.example").read_text()
        values = dict(line.split("=", 1) for line in example.splitlines() if line and not line.startswith("#"))
        lines = [line for line in (ROOT / "docker-compose.yml").read_text().splitlines() if not line.lstrip().startswith("#")]
        used = set(re.findall(r"\$\{([A-Z_]+)", "\n".join(lines)))
        assert used <= set(values), used - set(values)
        assert all(values[name] == "" for name in SECRETS)


class TestDockerfiles:
    @pytest.mark.parametrize("name", ["Dockerfile.api", "Dockerfile.worker"])
    def test_hadolint(self, name):
        result = subprocess.run(
            [str(Path(sys.executable).parent / "hadolint"), "--failure-threshold", "info", str(ROOT / "deploy" / name)],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stdout + result.stderr

    @pytest.mark.parametrize("name", ["Dockerfile.api", "Dockerfile.worker"])
    def test_multi_stage_pinned_non_root(self, name):
        text = (ROOT / "deploy" / name).read_text()
        bases = [
            line.split("=", 1)[1]
            for line in text.splitlines()
            if line.startswith("ARG ") and line.endswith(tuple("0123456789")) or "_IMAGE=" in line
        ]
        assert bases and all(":" in base and not base.endswith(":latest") for base in bases), bases
        assert text.count("\nFROM ") >= 3
        assert "USER 10001:10001" in text

    def test_the_api_image_has_no_torch_and_builds_the_dashboard(self):
        text = "\n".join(
            line for line in (ROOT / "deploy" / "Dockerfile.api").read_text().splitlines() if not line.startswith("#")
        )
        assert "npm ci" in text and "npm run build" in text and "RLPLANE_FRONTEND_DIR" in text
        assert "torch" not in text and "[train]" not in text and '".[api]"' in text
        worker = (ROOT / "deploy" / "Dockerfile.worker").read_text()
        assert "torch==2.13.0" in worker and "megatron-core==0.16.1" in worker and '".[train]"' in worker
        packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
        for image in (text, worker):  # every package of the wheel is in the image's build context
            assert all(f"COPY {name.rstrip('*')}/ {name.rstrip('*')}/" in image for name in packages), packages

    def test_the_extras_keep_the_database_off_gpu_nodes_and_torch_off_the_api(self):
        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

        def closure(*extras: str) -> set[str]:
            names, todo = set(), list(project["dependencies"]) + [f"rlplane[{e}]" for e in extras]
            while todo:
                requirement = todo.pop()
                name = re.split(r"[\[=<>~ ]", requirement, maxsplit=1)[0].lower()
                if name == "rlplane":
                    todo += [
                        d
                        for e in re.findall(r"\[([^]]+)\]", requirement)[0].split(",")
                        for d in project["optional-dependencies"][e]
                    ]
                else:
                    names.add(name)
            return names

        gpu_node, api_server = closure("train"), closure("api")
        assert {"torch", "celery", "transformers"} <= gpu_node and not gpu_node & {"sqlalchemy", "alembic", "psycopg", "fastapi"}
        assert {"fastapi", "sqlalchemy"} <= api_server and not api_server & {"torch", "transformers", "deepspeed"}


def _helm(*args: str) -> subprocess.CompletedProcess:
    if not HELM.exists():
        pytest.fail(f"{HELM} is missing: run `make deploy-tools` (make test does)")
    return subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=120)


def _render(*values: str) -> list[dict]:
    args = [a for v in values for a in (("-f", v) if v.endswith(".yaml") else ("--set", v))]
    result = _helm("template", "rl", str(CHART), "--namespace", "ml", *args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _validate(manifests: list[dict]) -> None:
    """Strict: a field the Kubernetes schema does not know is an error, as the API server would reject it."""
    for version in K8S_VERSIONS:
        for manifest in manifests:
            kubernetes_validate.validate(manifest, version, strict=True)


def test_the_schema_check_catches_a_wrong_field():
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"prots": [{"port": 80}]}}
    with pytest.raises(kubernetes_validate.ValidationError, match="prots"):
        _validate([service])


def _by_kind(manifests: list[dict]) -> dict[str, dict[str, dict]]:
    found: dict[str, dict[str, dict]] = {}
    for manifest in manifests:
        found.setdefault(manifest["kind"], {})[manifest["metadata"]["name"]] = manifest
    return found


EXTERNAL = (
    "secrets.databaseUrl=postgresql://rlplane:pw@db.internal:5432/rlplane",
    "secrets.brokerUrl=redis://:pw@redis.internal:6379/0",
)


class TestHelmChart:
    def test_lint(self):
        result = _helm("lint", "--strict", str(CHART), *[a for v in EXTERNAL for a in ("--set", v)])
        assert result.returncode == 0, result.stdout + result.stderr
        result = _helm("lint", "--strict", str(CHART), "-f", str(CHART / "ci" / "gpu-values.yaml"))
        assert result.returncode == 0, result.stdout + result.stderr

    def test_default_values_need_the_database_and_broker(self):
        result = _helm("template", "rl", str(CHART))
        assert result.returncode != 0 and "secrets.databaseUrl is required" in result.stderr

    def test_default_values_with_external_services(self):
        manifests = _render(*EXTERNAL)
        _validate(manifests)
        kinds = _by_kind(manifests)
        assert set(kinds) == {"Secret", "Deployment", "Service", "Job", "PersistentVolumeClaim"}
        assert set(kinds["Deployment"]) == {"rl-rlplane-api"}  # no worker before a worker token exists
        api = kinds["Deployment"]["rl-rlplane-api"]["spec"]["template"]["spec"]
        [container] = api["containers"]
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert container["securityContext"]["readOnlyRootFilesystem"] and api["securityContext"]["runAsNonRoot"]
        job = kinds["Job"]["rl-rlplane-migrate"]
        assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
        assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["rlplane", "migrate"]
        secret = kinds["Secret"]["rl-rlplane-secrets"]
        assert len(secret["stringData"]["RLPLANE_BOOTSTRAP_TOKEN"]) >= 24  # generated, never a fixed default
        assert kinds["PersistentVolumeClaim"]["rl-rlplane-artifacts"]["spec"]["accessModes"] == ["ReadWriteMany"]

    def test_gpu_queues_with_s3_ingress_and_network_policy(self):
        manifests = _render(str(CHART / "ci" / "gpu-values.yaml"))
        _validate(manifests)
        kinds = _by_kind(manifests)
        assert "Secret" not in kinds and "PersistentVolumeClaim" not in kinds  # existingSecret, s3:// root
        assert set(kinds["NetworkPolicy"]) == {"rl-rlplane-api", "rl-rlplane-worker"}
        assert kinds["Ingress"]["rl-rlplane"]["spec"]["tls"][0]["secretName"] == "rlplane-tls"
        gpu = kinds["Deployment"]["rl-rlplane-worker-gpu"]["spec"]
        assert gpu["replicas"] == 4
        pod = gpu["template"]["spec"]
        [container] = pod["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
        assert container["command"] == ["rlplane", "worker", "--queues", "gpu"]
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
        assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
        assert pod["terminationGracePeriodSeconds"] >= 120  # time to hand the run back
        env = {e["name"]: e for e in container["env"]}
        assert env["RLPLANE_ARTIFACTS"]["value"] == "s3://example-rlplane/artifacts"
        assert env["RLPLANE_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "rlplane-secrets", "key": "RLPLANE_WORKER_TOKEN"}
        assert "RLPLANE_DATABASE_URL" not in env
        assert container["envFrom"] == [{"secretRef": {"name": "rlplane-s3"}}]
        # Multi-node runs: the worker advertises its pod's (here the host's) address, and the workers' ranks may
        # reach each other on any port (the rendezvous and the collectives choose theirs at run time).
        assert env["RLPLANE_ADVERTISE_ADDRESS"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
        assert env["NCCL_SOCKET_IFNAME"]["value"] == "ib0"
        peers = kinds["NetworkPolicy"]["rl-rlplane-worker"]["spec"]["ingress"][1]
        assert "ports" not in peers and peers["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "worker"
        small = kinds["Deployment"]["rl-rlplane-worker-gpu-small"]["spec"]["template"]["spec"]["containers"][0]
        assert small["resources"]["limits"]["nvidia.com/gpu"] == 1

    def test_trial_mode_bundles_postgres_and_redis(self):
        manifests = _render(
            "postgresql.bundled=true", "redis.bundled=true", "networkPolicy.enabled=true", "secrets.workerToken=t"
        )
        _validate(manifests)
        kinds = _by_kind(manifests)
        assert set(kinds["StatefulSet"]) == {"rl-rlplane-postgresql", "rl-rlplane-redis"}
        assert "Job" not in kinds  # the database does not exist before install: the API migrates on start
        data = kinds["Secret"]["rl-rlplane-secrets"]["stringData"]
        assert (
            data["RLPLANE_DATABASE_URL"] == f"postgresql://rlplane:{data['POSTGRES_PASSWORD']}@rl-rlplane-postgresql:5432/rlplane"
        )
        assert data["RLPLANE_BROKER_URL"] == f"redis://:{data['REDIS_PASSWORD']}@rl-rlplane-redis:6379/0"
        assert "rl-rlplane-worker-cpu" in kinds["Deployment"]

    def test_notes_say_how_to_get_the_admin_token(self):
        result = _helm(
            "install", "rl", str(CHART), "--dry-run=client", "--namespace", "ml", *[a for v in EXTERNAL for a in ("--set", v)]
        )
        assert result.returncode == 0, result.stderr
        assert "get secret rl-rlplane-secrets" in result.stdout and "RLPLANE_BOOTSTRAP_TOKEN" in result.stdout
