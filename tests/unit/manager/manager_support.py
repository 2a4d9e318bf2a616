"""driver-manager test helpers: the fixture scenarios, an in-memory Kubernetes node API, a prepared node."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers.support import MANAGER_FIXTURES

from driver_container.base.paths import HostPaths
from driver_container.runtime.runner import Runner

FIXTURES = MANAGER_FIXTURES


@dataclass
class FakeApi:
    """In-memory NodeApi: node labels, pods that end when their operand is paused, and a call log."""

    labels: dict[str, str] = field(default_factory=dict)
    pods: list[str] = field(default_factory=list)
    calls: list[tuple[str, Any]] = field(default_factory=list)

    def node_labels(self, name: str) -> dict[str, str]:
        self.calls.append(("get", name))
        return dict(self.labels)

    def patch_node_labels(self, name: str, labels: Mapping[str, str | None]) -> dict[str, str]:
        self.calls.append(("patch", dict(labels)))
        for key, value in labels.items():
            if value is None:
                self.labels.pop(key, None)
            else:
                self.labels[key] = value
        return dict(self.labels)

    def list_pods(self, namespace: str | None, *, node: str, label_selector: str = "") -> list[dict[str, Any]]:
        self.calls.append(("list", (namespace, node, label_selector)))
        return [{"metadata": {"name": p}} for p in self.pods]

    def wait_for_pods_gone(
        self, namespace: str | None, *, node: str, label_selector: str, timeout: float, poll: float = 5.0
    ) -> None:
        self.calls.append(("wait", (namespace, node, timeout)))
        self.pods.clear()


@dataclass
class Node:
    root: Path
    paths: HostPaths
    runner: Runner
    umount_log: Path

    def umount_calls(self) -> list[str]:
        return self.umount_log.read_text().splitlines() if self.umount_log.exists() else []
