"""The refusal Event from every NVIDIADriver pool: docs/deploy/driver-events-rbac.yaml against the pools
gpu-operator v26.7.0's own code renders (tests/helpers/operator_render.py).

Each pool runs as its own service account, ``nvidia-<driverType>-driver-<CR>-<os tag>``
(NVIDIA/gpu-operator internal/state/driver.go ``getDriverName`` at 10ee5b3638b8), so a Talos upgrade brings
a new one. The manifest grants ``create`` on ``events`` to the group of every service account of the
operator's namespace. On the wire: the loopback API stand-in (tests/helpers/apiserver.py) with one token
per rendered account, deciding each request with the RBAC evaluator of tests/helpers/rbac.py over the
operator's own driver ClusterRole and ClusterRoleBinding for that account (manifests/state-driver at
v26.7.0, its two template fields filled) and, or not, the manifest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.apiserver import NODE, NS, ApiState, start_tls
from helpers.operator_render import TOOLS_DIR, deploy_objects, render, require_renderer, talos_node
from helpers.rbac import Authorizer, groups_of, service_account_user
from helpers.support import REPO
from helpers.tls import self_signed

from driver_container.kube.client import KubeClient
from driver_container.kube.endpoint import Endpoint, KubeConfig
from driver_container.kube.nodereport import PREFIX, REFUSED, NodeVerdict, report
from driver_container.settings import Cluster

MANIFEST = REPO / "docs/deploy/driver-events-rbac.yaml"
RELEASES = ("v1.13.9", "v1.14.0-rc.1")
EVENTS = f"/api/v1/namespaces/{NS}/events"
ENV = {"NODE_NAME": NODE, "KUBERNETES_SERVICE_HOST": "set-so-in-cluster"}
REFUSAL = NodeVerdict(REFUSED, reason="VERSION_MISMATCH: loaded 595.71.05, userspace 595.91.07; fix: ...")


def _manifest() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


@pytest.fixture(scope="module")
def accounts(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str]]:
    """(namespace, service account) of each DaemonSet the operator renders for two Talos releases from the
    quickstart's NVIDIADriver."""
    require_renderer()
    nodes = [talos_node(f"gpu-{r}", r) for r in RELEASES]
    crs = deploy_objects("nvidiadriver.yaml", "ghcr.io/example")
    rendered = render(nodes=nodes, nvidiadrivers=crs, tmp=tmp_path_factory.mktemp("render"))
    found = [
        (ds["metadata"]["namespace"], ds["spec"]["template"]["spec"]["serviceAccountName"])
        for ds in rendered.daemonsets
    ]
    assert sorted(found) == [(NS, f"nvidia-gpu-driver-talos-talos{r}") for r in RELEASES]  # one per pool
    return found


def _operator_rbac(namespace: str, account: str) -> list[dict[str, Any]]:
    """The operator's driver ClusterRole and its binding to ``account`` (manifests/state-driver at v26.7.0)."""
    docs = []
    for name in ("0210_clusterrole.yaml", "0310_clusterrolebinding.yaml"):
        text = (TOOLS_DIR / "manifests/state-driver" / name).read_text()
        text = text.replace("{{ .Driver.Name }}", account).replace("{{ .Runtime.Namespace }}", namespace)
        docs.append(yaml.safe_load(text))
    return docs


@pytest.mark.timeout(120)
def test_the_manifest_grants_events_create_to_every_rendered_pool_and_nothing_else(
    accounts: list[tuple[str, str]],
) -> None:
    manifest = _manifest()
    (binding,) = [d for d in manifest if d["kind"] == "RoleBinding"]
    authorize = Authorizer(manifest)
    for namespace, account in accounts:
        user = service_account_user(namespace, account)
        assert {s["name"] for s in binding["subjects"]} <= groups_of(user)  # the group, not the account
        assert authorize(user, "POST", f"/api/v1/namespaces/{namespace}/events")
        assert not authorize(user, "POST", "/api/v1/namespaces/default/events")  # its namespace only
        assert not authorize(user, "GET", f"/api/v1/namespaces/{namespace}/events")  # create only
        assert not authorize(user, "PATCH", f"/api/v1/nodes/{NODE}")
    assert not authorize(service_account_user("default", "x"), "POST", EVENTS)  # no other namespace's accounts
    assert not authorize("jane", "POST", EVENTS)


@pytest.fixture(scope="module")
def api_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("api-tls"), "server")


def _client_with(server_url: str, ca: Path, token: str) -> Callable[..., KubeClient]:
    def make(env: Mapping[str, str], stop: Callable[[], bool] | None = None) -> KubeClient:
        return KubeClient(Endpoint(server_url, verify=str(ca), token=token), KubeConfig(timeout=2.0, attempts=1))

    return make


@pytest.fixture(params=[True, False], ids=["with-manifest", "without-manifest"])
def api(
    request: pytest.FixtureRequest, accounts: list[tuple[str, str]], api_cert: tuple[Path, Path]
) -> Iterator[tuple[ApiState, str, Path, bool]]:
    applied = request.param
    objects = [o for ns, sa in accounts for o in _operator_rbac(ns, sa)] + (_manifest() if applied else [])
    state = ApiState(
        identities={f"token-{sa}": service_account_user(ns, sa) for ns, sa in accounts},
        authorize=Authorizer(objects),
    )
    httpd, server = start_tls(state, api_cert)
    assert server.ca is not None
    yield state, server.url, server.ca, applied
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.timeout(120)
def test_each_pool_posts_its_refusal_event_only_with_the_manifest(
    accounts: list[tuple[str, str]], api: tuple[ApiState, str, Path, bool]
) -> None:
    state, url, ca, applied = api
    for namespace, account in accounts:
        assert namespace == NS  # where init posts its Event (OPERATOR_NAMESPACE, default its own)
        factory = _client_with(url, ca, f"token-{account}")
        assert report(REFUSAL, Cluster.from_env(ENV), client_factory=factory, namespace=lambda c: NS) is applied
    assert state.users == [service_account_user(ns, sa) for ns, sa in accounts for _ in range(2)]
    assert state.annotations[f"{PREFIX}result"] == "refused"  # the operator's ClusterRole: patch nodes
    posts = [r for r in state.requests if r.method == "POST"]
    assert [r.path for r in posts] == [EVENTS] * len(accounts)
    assert len(state.events) == (len(accounts) if applied else 0)
    assert all(e["reason"] == "NvidiaDriverRefused" for e in state.events)
