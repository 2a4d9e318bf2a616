#!/usr/bin/env python3
"""The release matrix: one image per NVIDIA driver version that a Talos release ships (docs/image.md).

The facts are in release/talos-drivers.toml (production and LTS driver per Talos release, read from
siderolabs/extensions nvidia-gpu/vars.yaml at each release tag). Commands:

  matrix                 GitHub Actions matrix JSON: {"include": [{"driver": ..., "talos": "v1.13.9 ..."}]}
  tags DRIVER REPO       the image tags of one driver version, one per line: REPO:DRIVER and
                         REPO:DRIVER-talos<release> for every Talos release that ships it (the tag
                         gpu-operator asks for: <version>-<ID><VERSION_ID> of the node's os-release)
  verify EXTENSIONS_GIT  re-read every release from a siderolabs/extensions clone (git dir or work tree):
                         tag commit, NVIDIA_DRIVER_{PRODUCTION,LTS}_VERSION, and that the kmod packages'
                         vars.yaml still take their VERSION from those two variables

Standard library only: the release workflow runs it before any Python environment exists.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "release" / "talos-drivers.toml"
DRIVER_VERSION = re.compile(r"^\d{3}\.\d{2,3}(\.\d{2,3})?$")
TALOS_RELEASE = re.compile(r"^v1\.\d+\.\d+(-(alpha|beta|rc)\.\d+)?$")
# The kmod extensions (open and proprietary, each branch) and the variable each takes its VERSION from.
KMOD_VARS = {
    "nvidia-gpu/nvidia-modules/production/vars.yaml": "NVIDIA_DRIVER_PRODUCTION_VERSION",
    "nvidia-gpu/nvidia-modules/lts/vars.yaml": "NVIDIA_DRIVER_LTS_VERSION",
    "nvidia-gpu/nonfree/kmod-nvidia/production/vars.yaml": "NVIDIA_DRIVER_PRODUCTION_VERSION",
    "nvidia-gpu/nonfree/kmod-nvidia/lts/vars.yaml": "NVIDIA_DRIVER_LTS_VERSION",
}


@dataclass(frozen=True)
class TalosRelease:
    release: str
    extensions_commit: str
    production: str
    lts: str


def load(path: Path = DATA) -> list[TalosRelease]:
    entries = tomllib.loads(path.read_text())["talos"]
    releases = [TalosRelease(**entry) for entry in entries]
    for r in releases:
        if not TALOS_RELEASE.match(r.release) or not re.fullmatch(r"[0-9a-f]{40}", r.extensions_commit):
            raise ValueError(f"{path}: bad entry {r}")
        for driver in (r.production, r.lts):
            if not DRIVER_VERSION.match(driver):
                raise ValueError(f"{path}: {r.release}: bad driver version {driver!r}")
    if len({r.release for r in releases}) != len(releases):
        raise ValueError(f"{path}: a Talos release is listed twice")
    return releases


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def drivers(releases: list[TalosRelease]) -> dict[str, list[str]]:
    """Every driver version, oldest first, with the Talos releases that ship it (in file order)."""
    shipped: dict[str, list[str]] = {}
    for r in releases:
        for driver in dict.fromkeys((r.production, r.lts)):
            shipped.setdefault(driver, []).append(r.release)
    return {d: shipped[d] for d in sorted(shipped, key=version_key)}


def matrix(releases: list[TalosRelease]) -> dict[str, list[dict[str, str]]]:
    return {"include": [{"driver": d, "talos": " ".join(t)} for d, t in drivers(releases).items()]}


def tags(releases: list[TalosRelease], driver: str, repo: str) -> list[str]:
    return [f"{repo}:{driver}", *(f"{repo}:{driver}-talos{t}" for t in drivers(releases).get(driver, []))]


def _git(git_dir: str, *args: str) -> str:
    done = subprocess.run(["git", "-C", git_dir, *args], capture_output=True, text=True, check=True, timeout=60)
    return done.stdout


def _var(text: str, name: str) -> str | None:
    found = re.search(rf"^{name}:\s*\"?([^\"\s]+)", text, re.M)
    return found.group(1) if found else None


def verify(releases: list[TalosRelease], git_dir: str) -> list[str]:
    problems: list[str] = []
    for r in releases:
        commit = _git(git_dir, "rev-parse", f"{r.release}^{{commit}}").strip()
        if commit != r.extensions_commit:
            problems.append(f"{r.release}: tag is {commit}, the data file says {r.extensions_commit}")
        text = _git(git_dir, "show", f"{commit}:nvidia-gpu/vars.yaml")
        for field, name in (("production", "NVIDIA_DRIVER_PRODUCTION_VERSION"), ("lts", "NVIDIA_DRIVER_LTS_VERSION")):
            if _var(text, name) != getattr(r, field):
                problems.append(f"{r.release}: {name} is {_var(text, name)}, the data file says {getattr(r, field)}")
        for path, name in KMOD_VARS.items():
            if "{{ ." + name + " }}" not in _git(git_dir, "show", f"{commit}:{path}"):
                problems.append(f"{r.release}: {path} no longer takes its VERSION from {name}")
    return problems


def main(argv: list[str]) -> int:
    releases = load()
    match argv:
        case ["matrix"]:
            print(json.dumps(matrix(releases)))
        case ["tags", driver, repo]:
            print("\n".join(tags(releases, driver, repo)))
        case ["verify", git_dir]:
            problems = verify(releases, git_dir)
            print("\n".join(problems) or f"{len(releases)} Talos releases agree with {git_dir}")
            return 1 if problems else 0
        case _:
            print(__doc__, file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
