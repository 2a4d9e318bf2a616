"""NVIDIA gpu-operator v26.7.0's own code rendering the driver DaemonSets for Talos nodes (docs/operator.md).

Nothing here models the operator: ``render-driver`` runs its node labelling, its ClusterPolicy
``state-driver`` and its NVIDIADriver reconcile (NVIDIA/gpu-operator tag v26.7.0, commit
10ee5b3638b89e11e949412aafa5ba99279c3721, built as the README beside it says) against controller-runtime's
fake client, and the DaemonSets and ConfigMaps it writes are only read back here. The tools stay outside
the project: GPU_OPERATOR_TOOLS_DIR, default ``<repo>/../shared/tools/gpu-operator-v26.7.0``.

- ``talos_node``: a v1 Node as Node Feature Discovery v0.19 labels a Talos GPU node. Talos writes
  ``ID=talos`` and ``VERSION_ID=<tag>``, the tag with its ``v`` (siderolabs/talos
  pkg/machinery/constants/constants.go ``OSReleaseTemplate`` filled by pkg/machinery/version/osrelease.go
  ``OSReleaseFor``; the generated pkg/machinery/version/os-release at v1.13.9 3ebd10a7 and v1.14.0-rc.1
  7a84d742 says ``VERSION_ID=v1.13.9``, ``VERSION_ID=v1.14.0-rc.1``). NFD keeps the value as it is, quotes
  trimmed, and adds ``VERSION_ID.major``/``.minor`` only for a value that starts with a digit, so Talos
  nodes get none (kubernetes-sigs/node-feature-discovery v0.19.0 ed2eaa49 source/system/system.go
  ``parseOSRelease``, ``splitVersion``). ``kernel-version.full`` is the kernel release, characters outside
  ``[-A-Za-z0-9_.]`` replaced (source/kernel/version.go ``parseVersion``). ``pci-10de.present`` is the PCI
  source with the chart's ``deviceLabelFields: [vendor]`` (gpu-operator deployments/gpu-operator/values.yaml
  ``node-feature-discovery.worker.config`` at 10ee5b36).
- ``clusterpolicy_from_values``: the ClusterPolicy the chart's templates/clusterpolicy.yaml makes from a
  values file, for the sections the driver state reads.
- ``render``: one run of ``render-driver``; ``Rendered`` sorts its output into DaemonSets, containers,
  env, mounts and the startup-probe script.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from helpers.support import REPO, require

OPERATOR_VERSION = "v26.7.0"
OPERATOR_COMMIT = "10ee5b3638b89e11e949412aafa5ba99279c3721"
TOOLS_DIR = Path(
    os.environ.get("GPU_OPERATOR_TOOLS_DIR", REPO.parent / "shared/tools" / f"gpu-operator-{OPERATOR_VERSION}")
)
RENDER_TIMEOUT = 60  # seconds; one render takes ~0.6 s (README beside the tools)
NFD = "feature.node.kubernetes.io"
OS_ID_LABEL = f"{NFD}/system-os_release.ID"
OS_VERSION_LABEL = f"{NFD}/system-os_release.VERSION_ID"
KERNEL_LABEL = f"{NFD}/kernel-version.full"
GPU_PCI_LABEL = f"{NFD}/pci-10de.present"
PROBE_CONFIGMAP = "nvidia-driver-startup-probe"  # assets/state-driver/0400_configmap.yaml
PROBE_KEY = "startup-probe.sh"

# Per Talos release: its kernel (siderolabs/talos pkg/machinery/constants/constants.go DefaultKernelVersion
# at the tag) and its containerd (siderolabs/pkgs Pkgfile containerd_version at the PKGS of Talos's Makefile:
# v1.13.9 f541ca43, v1.14.0-rc.1 effed43). The operator reads only the runtime's scheme
# (controllers/state_manager.go getRuntimeString).
TALOS = {
    "v1.13.9": ("6.18.44-talos", "2.2.7"),
    "v1.14.0-rc.1": ("6.18.44-talos", "2.3.3"),
}

_LABEL_VALUE = re.compile(r"[^-A-Za-z0-9_.]")


@functools.cache
def require_renderer() -> Path:
    """The tools' directory, after checking that ``render-driver`` and the operator binary are there."""
    wrapper, binary = TOOLS_DIR / "render-driver", TOOLS_DIR / "gpu-operator-render"
    present = os.access(wrapper, os.X_OK) and os.access(binary, os.X_OK) and (TOOLS_DIR / "assets").is_dir()
    what = f"gpu-operator {OPERATOR_VERSION} render-driver and gpu-operator-render in {TOOLS_DIR}"
    require(present, what, how=f"set GPU_OPERATOR_TOOLS_DIR to a build of NVIDIA/gpu-operator {OPERATOR_VERSION}")
    return TOOLS_DIR


def talos_node(name: str, version: str = "v1.13.9", kernel: str | None = None) -> dict[str, Any]:
    """A Talos GPU node of release ``version`` as NFD v0.19 labels it (module docstring); ``kernel``
    defaults to that release's kernel."""
    known = TALOS.get(version)
    if kernel is None and known is None:
        raise ValueError(f"no kernel known for Talos {version}: pass kernel=")
    release = kernel or (known[0] if known else "")
    runtime = f"containerd://{known[1]}" if known else "containerd://"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                GPU_PCI_LABEL: "true",
                OS_ID_LABEL: "talos",
                OS_VERSION_LABEL: version,
                KERNEL_LABEL: _LABEL_VALUE.sub("_", release).strip("-_."),
            },
        },
        "status": {
            "nodeInfo": {
                "osImage": f"Talos ({version})",
                "kernelVersion": release,
                "containerRuntimeVersion": runtime,
                "operatingSystem": "linux",
                "architecture": "amd64",
            }
        },
    }


def ubuntu_node(name: str, version: str = "24.04", kernel: str = "6.8.0-60-generic") -> dict[str, Any]:
    """An Ubuntu GPU node as NFD v0.19 labels it: ``ID=ubuntu``, ``VERSION_ID`` and, the value starting
    with a digit, ``VERSION_ID.major``/``.minor`` (source/system/system.go ``splitVersion``, module
    docstring)."""
    node = talos_node(name, version, kernel=kernel)
    labels, info = node["metadata"]["labels"], node["status"]["nodeInfo"]
    major, minor = version.split(".", 1)
    labels.update({OS_ID_LABEL: "ubuntu", f"{OS_VERSION_LABEL}.major": major, f"{OS_VERSION_LABEL}.minor": minor})
    info.update({"osImage": f"Ubuntu {version} LTS", "containerRuntimeVersion": "containerd://2.2.7"})
    return node


def stored(objects: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rendered objects (``Rendered.objects``, ``Rendered.nodes``) as the next render gets them back, as the
    API server keeps them between reconciles: without ``metadata.resourceVersion``, which
    controller-runtime's fake client refuses on Create."""
    out = [copy.deepcopy(dict(o)) for o in objects]
    for o in out:
        o["metadata"].pop("resourceVersion", None)
    return out


# ---------------------------------------------------------------------------------------------------------
# The Helm chart's ClusterPolicy


# The chart's defaults for the sections clusterpolicy_from_values maps (deployments/gpu-operator/values.yaml
# at 10ee5b36). The released chart is versioned v26.7.0 (Chart.yaml in the tree says v1.0.0-devel).
CHART = {"name": "gpu-operator", "version": OPERATOR_VERSION, "appVersion": OPERATOR_VERSION}
RELEASE_NAME = "gpu-operator"  # helm install gpu-operator ... (docs/deploy/gpu-operator-values.yaml)
_UPGRADE_DEFAULTS = {
    "autoUpgrade": True,
    "maxParallelUpgrades": 1,
    "maxUnavailable": "25%",
    "waitForCompletion": {"timeoutSeconds": 0, "podSelector": ""},
    "gpuPodDeletion": {"force": False, "timeoutSeconds": 300, "deleteEmptyDir": False},
    "drain": {"enable": False, "force": False, "podSelector": "", "timeoutSeconds": 300, "deleteEmptyDir": False},
}
CHART_DEFAULTS: dict[str, Any] = {
    "psa": {"enabled": False},
    "cdi": {"enabled": True, "nriPluginEnabled": False},
    "hostPaths": {"rootFS": "/", "driverInstallDir": "/run/nvidia/driver"},
    "daemonsets": {
        "labels": {},
        "annotations": {},
        "priorityClassName": "system-node-critical",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "updateStrategy": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "1"},
    },
    "operator": {"runtimeClass": "nvidia", "use_ocp_driver_toolkit": False},
    "mig": {"strategy": "single"},
    "driver": {
        "enabled": True,
        "nvidiaDriverCRD": {"enabled": False, "deployDefaultCR": True, "driverType": "gpu", "nodeSelector": {}},
        "kernelModuleType": "auto",
        "usePrecompiled": False,
        "repository": "nvcr.io/nvidia",
        "image": "driver",
        "version": "595.91.07",
        "imagePullPolicy": "IfNotPresent",
        "imagePullSecrets": [],
        "startupProbe": {"initialDelaySeconds": 60, "periodSeconds": 10, "timeoutSeconds": 60, "failureThreshold": 120},
        "rdma": {"enabled": False, "useHostMofed": False},
        "upgradePolicy": _UPGRADE_DEFAULTS,
        "manager": {
            "repository": "nvcr.io/nvidia/cloud-native",
            "image": "k8s-driver-manager",
            "version": "v0.12.0",
            "imagePullPolicy": "IfNotPresent",
            "env": [],
        },
        "env": [],
        "resources": {},
        "repoConfig": {"configMapName": ""},
        "certConfig": {"name": ""},
        "licensingConfig": {"secretName": "", "nlsEnabled": True},
        "virtualTopology": {"config": ""},
        "kernelModuleConfig": {"name": ""},
        "secretEnv": "",
        "hostNetwork": False,
    },
    "toolkit": {
        "enabled": True,
        "repository": "nvcr.io/nvidia/k8s",
        "image": "container-toolkit",
        "version": "v1.20.0",
        "imagePullPolicy": "IfNotPresent",
        "imagePullSecrets": [],
        "env": [],
        "resources": {},
        "installDir": "/usr/local/nvidia",
        "hostNetwork": False,
    },
    "migManager": {
        "enabled": True,
        "repository": "nvcr.io/nvidia/cloud-native",
        "image": "k8s-mig-manager",
        "version": "v0.15.0",
        "imagePullPolicy": "IfNotPresent",
        "imagePullSecrets": [],
        "env": [],
        "resources": {},
        "config": {"default": "all-disabled", "create": False, "name": "", "data": {}},
        "gpuClientsConfig": {"name": ""},
        "hostNetwork": False,
    },
    "gds": {
        "enabled": False,
        "repository": "nvcr.io/nvidia/cloud-native",
        "image": "nvidia-fs",
        "version": "2.29.4",
        "imagePullPolicy": "IfNotPresent",
        "imagePullSecrets": [],
        "env": [],
        "args": [],
    },
    "gdrcopy": {
        "enabled": False,
        "repository": "nvcr.io/nvidia/cloud-native",
        "image": "gdrdrv",
        "version": "v2.6",
        "imagePullPolicy": "IfNotPresent",
        "imagePullSecrets": [],
        "env": [],
        "args": [],
    },
}


def merge_values(defaults: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """Helm's coalescing of user values over the chart's: maps merge key by key, anything else (lists
    included) replaces, and a null removes the chart's key (helm pkg/chartutil coalesce.go)."""
    merged = copy.deepcopy(dict(defaults))
    for key, value in values.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_values(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _truthy(value: Any) -> bool:
    """Go template truth (text/template ``if``, sprig ``default``): false, 0, "", nil, empty maps and lists
    are false."""
    return value not in (None, False, 0, "") and not (isinstance(value, Mapping | list) and not value)


def _plain(value: Any) -> Any:
    """``key: {{ value }}``: printed as Go prints it, then read back as YAML (``/`` stays a string, an empty
    value is null)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return value
    return yaml.safe_load(str(value)) if str(value) != "" else None


def _quote(value: Any) -> str:
    """``{{ value | quote }}``: always a string."""
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _default(value: Any, fallback: Any) -> Any:
    """``{{ value | default fallback }}``, printed."""
    return _plain(value if _truthy(value) else fallback)


def _optional(out: dict[str, Any], section: Mapping[str, Any], key: str, how: str = "plain") -> None:
    """``{{- if .Values.<section>.<key> }} key: ... {{- end }}`` with ``how`` = plain, quote or toYaml."""
    value = section.get(key)
    if _truthy(value):
        out[key] = _quote(value) if how == "quote" else copy.deepcopy(value) if how == "toYaml" else _plain(value)


def _image_section(section: Mapping[str, Any], *, version: str = "optional") -> dict[str, Any]:
    """repository, image, version, imagePullPolicy, imagePullSecrets of an operand, as the template writes
    them (version always quoted; for gds and gdrcopy written even when empty)."""
    out: dict[str, Any] = {}
    _optional(out, section, "repository")
    _optional(out, section, "image")
    if version == "always":
        out["version"] = _quote(section.get("version"))
    else:
        _optional(out, section, "version", "quote")
    _optional(out, section, "imagePullPolicy")
    _optional(out, section, "imagePullSecrets", "toYaml")
    return out


def _driver(d: Mapping[str, Any]) -> dict[str, Any]:
    crd = (d.get("nvidiaDriverCRD") or {}).get("enabled")
    out: dict[str, Any] = {"enabled": _plain(d.get("enabled")), "useNvidiaDriverCRD": _plain(crd)}
    if not _truthy(crd):
        out["kernelModuleType"] = _plain(d.get("kernelModuleType"))
        out["usePrecompiled"] = _plain(d.get("usePrecompiled"))
        out.update(_image_section(d))
        for key in ("startupProbe", "livenessProbe", "readinessProbe"):
            _optional(out, d, key, "toYaml")
        rdma = d.get("rdma") or {}
        out["rdma"] = {"enabled": _plain(rdma.get("enabled")), "useHostMofed": _plain(rdma.get("useHostMofed"))}
        manager = d.get("manager") or {}
        out["manager"] = _image_section({k: v for k, v in manager.items() if k != "imagePullSecrets"})
        _optional(out["manager"], manager, "env", "toYaml")
        out["manager"] = out["manager"] or None  # an empty `manager:` is null
        for key in ("repoConfig", "certConfig", "licensingConfig", "virtualTopology", "kernelModuleConfig"):
            _optional(out, d, key, "toYaml")
        _optional(out, d, "secretEnv")
        for key in ("resources", "env", "args"):
            _optional(out, d, key, "toYaml")
    policy: Mapping[str, Any] = d.get("upgradePolicy") or {}
    if _truthy(policy):
        wait, deletion, drain = policy["waitForCompletion"], policy["gpuPodDeletion"], policy["drain"]
        out["upgradePolicy"] = {
            "autoUpgrade": _default(policy.get("autoUpgrade"), False),
            "maxParallelUpgrades": _default(policy.get("maxParallelUpgrades"), 0),
            "maxUnavailable": _default(policy.get("maxUnavailable"), "25%"),
            "waitForCompletion": {"timeoutSeconds": _plain(wait.get("timeoutSeconds"))},
            "podDeletion": {
                "force": _default(deletion.get("force"), False),
                "timeoutSeconds": _plain(deletion.get("timeoutSeconds")),
                "deleteEmptyDir": _default(deletion.get("deleteEmptyDir"), False),
            },
            "drain": {
                "enable": _default(drain.get("enable"), False),
                "force": _default(drain.get("force"), False),
                "timeoutSeconds": _plain(drain.get("timeoutSeconds")),
                "deleteEmptyDir": _default(drain.get("deleteEmptyDir"), False),
            },
        }
        _optional(out["upgradePolicy"]["waitForCompletion"], wait, "podSelector")
        _optional(out["upgradePolicy"]["drain"], drain, "podSelector")
    _optional(out, d, "hostNetwork")
    return out


def _operand(section: Mapping[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """``enabled`` plus the image fields, then ``keys`` (toYaml, or plain for installDir and hostNetwork)."""
    out: dict[str, Any] = {"enabled": _plain(section.get("enabled")), **_image_section(section)}
    for key in keys:
        _optional(out, section, key, "plain" if key in ("installDir", "hostNetwork") else "toYaml")
    return out


def _mig_manager(m: Mapping[str, Any]) -> dict[str, Any]:
    out = _operand(m, ("resources", "env", "args"))
    config: Mapping[str, Any] = m.get("config") or {}
    if _truthy(config):
        out["config"] = {}
        _optional(out["config"], config, "name")
        out["config"]["default"] = _quote(config.get("default"))
    _optional(out, m, "gpuClientsConfig", "toYaml")
    _optional(out, m, "hostNetwork")
    return out


def _sidecar(s: Mapping[str, Any], *, enabled_default: bool) -> dict[str, Any]:
    enabled = _default(s.get("enabled"), False) if enabled_default else _plain(s.get("enabled"))
    out: dict[str, Any] = {"enabled": enabled, **_image_section(s, version="always")}
    for key in ("env", "args"):
        _optional(out, s, key, "toYaml")
    return out


MAPPED = frozenset(
    {"psa", "cdi", "hostPaths", "daemonsets", "operator", "mig", "driver", "toolkit", "migManager", "gds", "gdrcopy"}
)


def clusterpolicy_from_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """The ClusterPolicy ``helm install gpu-operator nvidia/gpu-operator --version v26.7.0 -f <values>`` creates.

    Mirrors deployments/gpu-operator/templates/clusterpolicy.yaml of NVIDIA/gpu-operator at
    10ee5b3638b89e11e949412aafa5ba99279c3721 (tag v26.7.0), key by key, over the chart's defaults
    (``CHART_DEFAULTS``, from values.yaml at the same commit) merged with ``values`` as Helm merges them:
    ``hostPaths``, ``operator`` (runtimeClass, defaultGPUMode, use_ocp_driver_toolkit, metrics),
    ``daemonsets`` (with the chart's operand labels), ``mig``, ``psa``, ``cdi`` (nriPluginEnabled only with
    enabled), ``driver`` (everything but enabled, useNvidiaDriverCRD, upgradePolicy and hostNetwork left out
    when ``nvidiaDriverCRD.enabled``; upgradePolicy's ``gpuPodDeletion`` written as ``podDeletion``; versions
    quoted; ``if`` blocks left out for Go-false values), ``toolkit``, ``migManager``, ``gds`` and ``gdrcopy``
    (their ``version`` always written). The sections the driver state does not read (validator,
    devicePlugin, dcgm, dcgmExporter, gfd, nodeStatusExporter, the sandbox, vGPU, kata, vfio and CC ones) are
    left out; a values key outside the mapped sections raises ValueError rather than being dropped unseen.
    """
    unmapped = sorted(set(values) - MAPPED)
    if unmapped:
        raise ValueError(f"values keys clusterpolicy_from_values does not map: {unmapped}")
    v = merge_values(CHART_DEFAULTS, values)
    chart = f"{CHART['name']}-{CHART['version']}".replace("+", "_")
    spec: dict[str, Any] = {}
    host = v.get("hostPaths") or {}
    spec["hostPaths"] = {"rootFS": _plain(host.get("rootFS")), "driverInstallDir": _plain(host.get("driverInstallDir"))}
    _optional(spec["hostPaths"], host, "kubeletRootDir")
    operator = v.get("operator") or {}
    spec["operator"] = {}
    for key in ("runtimeClass", "defaultGPUMode", "use_ocp_driver_toolkit"):
        _optional(spec["operator"], operator, key)
    if _truthy(operator.get("metrics")):
        spec["operator"]["metrics"] = {}
        _optional(spec["operator"]["metrics"], operator["metrics"], "serviceMonitor", "toYaml")
    spec["operator"] = spec["operator"] or None
    ds = v.get("daemonsets") or {}
    spec["daemonsets"] = {
        "labels": {"helm.sh/chart": chart, "app.kubernetes.io/managed-by": CHART["name"], **(ds.get("labels") or {})}
    }
    for key, how in (
        ("annotations", "toYaml"),
        ("tolerations", "toYaml"),
        ("priorityClassName", "plain"),
        ("updateStrategy", "plain"),
    ):
        _optional(spec["daemonsets"], ds, key, how)
    if _truthy(ds.get("rollingUpdate")):
        spec["daemonsets"]["rollingUpdate"] = {"maxUnavailable": _quote(ds["rollingUpdate"].get("maxUnavailable"))}
    mig = v.get("mig") or {}
    spec["mig"] = {"strategy": _plain(mig["strategy"])} if _truthy(mig.get("strategy")) else None
    spec["psa"] = {"enabled": _plain((v.get("psa") or {}).get("enabled"))}
    cdi = v.get("cdi") or {}
    spec["cdi"] = {"enabled": _plain(cdi.get("enabled"))}
    if _truthy(cdi.get("enabled")) and _truthy(cdi.get("nriPluginEnabled")):
        spec["cdi"]["nriPluginEnabled"] = _plain(cdi["nriPluginEnabled"])
    spec["driver"] = _driver(v.get("driver") or {})
    spec["toolkit"] = _operand(v.get("toolkit") or {}, ("resources", "env", "installDir", "hostNetwork"))
    spec["migManager"] = _mig_manager(v.get("migManager") or {})
    if _truthy(v.get("gds")):
        spec["gds"] = _sidecar(v["gds"], enabled_default=False)
    if _truthy(v.get("gdrcopy")):
        spec["gdrcopy"] = _sidecar(v["gdrcopy"], enabled_default=True)
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {
            "name": "cluster-policy",
            "labels": {
                "app.kubernetes.io/name": CHART["name"],
                "helm.sh/chart": chart,
                "app.kubernetes.io/instance": RELEASE_NAME,
                "app.kubernetes.io/version": CHART["appVersion"],
                "app.kubernetes.io/managed-by": "Helm",
                "app.kubernetes.io/component": "gpu-operator",
            },
        },
        "spec": spec,
    }


# ---------------------------------------------------------------------------------------------------------
# Rendering and reading the result


class ValueFrom(NamedTuple):
    """An env entry set from ``valueFrom``: ``kind`` (fieldRef, secretKeyRef, ...) and what it names."""

    kind: str
    ref: str


class Mount(NamedTuple):
    """A container's volume mount with its volume: ``source`` is the hostPath path, the ConfigMap or Secret
    name, or "" for other volume kinds (``volume_kind`` says which)."""

    mount_path: str
    volume: str
    volume_kind: str  # hostPath | configMap | secret | emptyDir | ...
    source: str
    sub_path: str | None
    read_only: bool
    propagation: str | None


def env_of(container: Mapping[str, Any]) -> dict[str, str | ValueFrom]:
    """Name -> value as the container gets it: a ``valueFrom`` entry as a ValueFrom, an entry with neither
    as "", and of a name given twice the later entry, as the kubelet takes them (the NVIDIADriver path
    appends ``spec.manager.env`` after the manifest's own entries of the same names)."""
    out: dict[str, str | ValueFrom] = {}
    for entry in container.get("env") or []:
        source = entry.get("valueFrom")
        if source:
            ((kind, ref),) = source.items()
            detail = ref.get("fieldPath") or ref.get("resource") or f"{ref.get('name')}/{ref.get('key')}"
            out[entry["name"]] = ValueFrom(kind, str(detail))
        else:
            out[entry["name"]] = str(entry.get("value", ""))
    return out


def mounts_of(container: Mapping[str, Any], ds: Mapping[str, Any]) -> list[Mount]:
    """The container's mounts, each resolved to its volume in the DaemonSet's pod spec."""
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"].get("volumes") or []}
    mounts = []
    for m in container.get("volumeMounts") or []:
        volume = volumes[m["name"]]
        kind = next(k for k in volume if k != "name")
        body = volume[kind] or {}
        source = body.get("path") or body.get("name") or body.get("secretName") or ""
        mounts.append(
            Mount(
                m["mountPath"],
                m["name"],
                kind,
                str(source),
                m.get("subPath"),
                bool(m.get("readOnly", False)),
                m.get("mountPropagation"),
            )
        )
    return mounts


def containers_of(ds: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Init containers first, then the containers, as the pod spec lists them."""
    pod = ds["spec"]["template"]["spec"]
    return [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]


@dataclass(frozen=True)
class Rendered:
    """What one render wrote: the objects of ``--out`` (DaemonSets, then ConfigMaps), the nodes of
    ``--nodes-out``, and the summary (stdout) and ``RENDER-WARNING:`` lines (stderr)."""

    objects: tuple[dict[str, Any], ...]
    nodes: tuple[dict[str, Any], ...]
    summary: str
    warnings: tuple[str, ...]

    @property
    def daemonsets(self) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == "DaemonSet"]

    @property
    def configmaps(self) -> dict[str, dict[str, Any]]:
        return {o["metadata"]["name"]: o for o in self.objects if o["kind"] == "ConfigMap"}

    def daemonset(self, prefix: str) -> dict[str, Any]:
        """The one DaemonSet whose name starts with ``prefix`` (NVIDIADriver names end in a UID hash)."""
        (found,) = [d for d in self.daemonsets if d["metadata"]["name"].startswith(prefix)]
        return found

    @staticmethod
    def container(ds: Mapping[str, Any], name: str) -> dict[str, Any]:
        for c in containers_of(ds):
            if c["name"] == name:
                return c
        raise KeyError(f"{ds['metadata']['name']}: no container {name}")

    @staticmethod
    def env_of(container: Mapping[str, Any]) -> dict[str, str | ValueFrom]:
        return env_of(container)

    @staticmethod
    def mounts_of(container: Mapping[str, Any], ds: Mapping[str, Any]) -> list[Mount]:
        return mounts_of(container, ds)

    def probe_script(self) -> str:
        """``startup-probe.sh`` of the ``nvidia-driver-startup-probe`` ConfigMap: the driver container's
        startup probe (``sh /usr/local/bin/startup-probe.sh``)."""
        return str(self.configmaps[PROBE_CONFIGMAP]["data"][PROBE_KEY])


def _write(path: Path, docs: Sequence[Mapping[str, Any]]) -> Path:
    path.write_text(json.dumps(list(docs), indent=1) + "\n")  # JSON is YAML: render-driver reads a list
    return path


def render(
    *,
    nodes: Sequence[Mapping[str, Any]],
    clusterpolicy: Mapping[str, Any] | None = None,
    nvidiadrivers: Sequence[Mapping[str, Any]] | None = None,
    objects: Sequence[Mapping[str, Any]] | None = None,
    env: Mapping[str, str] | None = None,
    tmp: Path,
) -> Rendered:
    """Run ``render-driver`` once in ``tmp`` (an empty directory of its own):
    ``render-driver --nodes N [--clusterpolicy C] [--nvidiadriver D] [--objects O] --out OUT --nodes-out NO``.
    Its environment is PATH and TMPDIR only, plus ``env`` (the operator's image fallbacks such as
    DRIVER_MANAGER_IMAGE come from there, so none leaks in from the caller's). A failure raises with the
    operator's log."""
    tools = require_renderer()
    if clusterpolicy is None and not nvidiadrivers:
        raise ValueError("render needs a ClusterPolicy, NVIDIADriver objects or both")
    tmp.mkdir(parents=True, exist_ok=True)
    argv = [str(tools / "render-driver"), "--nodes", str(_write(tmp / "nodes.json", nodes))]
    if clusterpolicy is not None:
        argv += ["--clusterpolicy", str(_write(tmp / "clusterpolicy.json", [clusterpolicy]))]
    if nvidiadrivers:
        argv += ["--nvidiadriver", str(_write(tmp / "nvidiadrivers.json", nvidiadrivers))]
    if objects:
        argv += ["--objects", str(_write(tmp / "objects.json", objects))]
    out, nodes_out = tmp / "out.json", tmp / "nodes-out.json"
    argv += ["--out", str(out), "--nodes-out", str(nodes_out)]
    run_env = {"PATH": os.environ.get("PATH", os.defpath), "TMPDIR": str(tmp), **(env or {})}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RENDER_TIMEOUT, check=False, env=run_env)
    if done.returncode != 0:
        raise RuntimeError(f"render-driver exit {done.returncode}\n{done.stderr[-8000:]}")
    warnings = tuple(line for line in done.stderr.splitlines() if line.startswith("RENDER-WARNING: "))
    return Rendered(
        objects=tuple(json.loads(out.read_text())),
        nodes=tuple(json.loads(nodes_out.read_text())),
        summary=done.stdout,
        warnings=warnings,
    )


# What docs/deploy's files leave for the user to fill: a reserved name that never resolves (RFC 2606 .invalid),
# a valid reference as it is, so the samples render unmodified (tests/integration/test_samples_as_shipped.py).
PLACEHOLDER_REGISTRY = "registry.invalid"


def deploy_objects(name: str, registry: str) -> list[dict[str, Any]]:
    """The objects of ``docs/deploy/<name>`` as shipped, with only the registry filled: every
    ``repository: registry.invalid`` becomes ``registry`` (what a user edits before applying them)."""
    docs = [d for d in yaml.safe_load_all((REPO / "docs/deploy" / name).read_text()) if d]

    def fill(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: registry if k == "repository" and v == PLACEHOLDER_REGISTRY else fill(v) for k, v in node.items()
            }
        return [fill(item) for item in node] if isinstance(node, list) else node

    return [fill(d) for d in docs]
