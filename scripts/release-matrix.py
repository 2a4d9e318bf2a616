#!/usr/bin/env python3
"""The release matrix: one image per NVIDIA driver version that a Talos release ships (docs/image.md).

The facts are in release/talos-drivers.toml (production and LTS driver per Talos release, read from
siderolabs/extensions nvidia-gpu/vars.yaml at each release tag). Commands:

  matrix                 GitHub Actions matrix JSON: {"include": [{"driver": ..., "talos": "v1.13.9 ..."}]}
  tags DRIVER REPO       the image tags of one driver version, one per line (docs/image.md, "Tags"):
                         DRIVER, DRIVER-<project version> (immutable), and for every Talos release R that
                         ships it DRIVER-talosR and DRIVER-<project version>-talosR (the operator asks for
                         <version>-<ID><VERSION_ID> of the node's os-release), production-talosR /
                         lts-talosR where R ships it on that branch (the moving channel) with
                         production-<project version>-talosR / lts-<project version>-talosR (the
                         versioned channel: immutable), and manager / manager-<project version> on the
                         driver the manager tag follows
  plan --tags FILE --vars-dir DIR --published FILE [--write]
                         what following Talos needs (JSON): FILE is `git ls-remote --tags` of
                         siderolabs/extensions, DIR/<release>.yaml its nvidia-gpu/vars.yaml at each release
                         not yet in the data file, --published the tags the registry holds (one a line);
                         --write also rewrites the data file
  pending --tags FILE    "<release> <commit>" of each followed release the data file lacks (whose vars.yaml
                         plan needs)
  verify EXTENSIONS_GIT  re-read every release from a siderolabs/extensions clone (git dir or work tree):
                         tag commit, NVIDIA_DRIVER_{PRODUCTION,LTS}_VERSION, the archive pins
                         NVIDIA_PKGS_<TIER>_<ARCH>_SHA{256,512}, that the kmod packages' vars.yaml still
                         take their VERSION from those two variables and that nvidia-pkgs/<tier>/pkg.yaml
                         still downloads the archive URL recorded here with those pins
  pins DRIVER ARCH       NVIDIA_ARCHIVE_URL=, NVIDIA_ARCHIVE_SHA256=, NVIDIA_ARCHIVE_SHA512= (one a line): the
                         Dockerfile's build arguments for NVIDIA's driver archive of DRIVER on ARCH (amd64,
                         arm64), as Talos pins it
  driver RELEASE TIER    the driver version Talos RELEASE ships on TIER (production, lts)

Environment: RELEASE_DATA, another data file than release/talos-drivers.toml.
Standard library only: the release workflow runs it before any Python environment exists.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "release" / "talos-drivers.toml"
FIRST_RELEASE = (1, 12, 0)
CHANNELS = ("production", "lts")
# The driver manager's tag: gpu-operator uses driver.manager's repository/image/version as they are, no OS
# suffix (NVIDIA/gpu-operator controllers/object_controls.go transformDriverManagerInitContainer -> ImagePath,
# api/nvidia/v1/clusterpolicy_types.go, at v26.7.0 10ee5b3638b8), so one tag serves every Talos release.
MANAGER = "manager"
PRE_RANK = {"alpha": 0, "beta": 1, "rc": 2}
DRIVER_VERSION = re.compile(r"^\d{3}\.\d{2,3}(\.\d{2,3})?$")
TALOS_RELEASE = re.compile(r"^v1\.\d+\.\d+(-(alpha|beta|rc)\.\d+)?$")
# The kmod extensions (open and proprietary, each branch) and the variable each takes its VERSION from.
KMOD_VARS = {
    "nvidia-gpu/nvidia-modules/production/vars.yaml": "NVIDIA_DRIVER_PRODUCTION_VERSION",
    "nvidia-gpu/nvidia-modules/lts/vars.yaml": "NVIDIA_DRIVER_LTS_VERSION",
    "nvidia-gpu/nonfree/kmod-nvidia/production/vars.yaml": "NVIDIA_DRIVER_PRODUCTION_VERSION",
    "nvidia-gpu/nonfree/kmod-nvidia/lts/vars.yaml": "NVIDIA_DRIVER_LTS_VERSION",
}
# NVIDIA's driver archive as Sidero's nvidia-pkgs downloads it (siderolabs/extensions
# nvidia-gpu/nvidia-container-toolkit/nvidia-pkgs/{production,lts}/pkg.yaml, sources: linux-x86_64 for
# amd64, linux-sbsa for aarch64, at v1.12.0 5572e825 through v1.14.0-rc.1), its hashes taken from
# NVIDIA_PKGS_<TIER>_<ARCH>_SHA256/_SHA512 of nvidia-gpu/vars.yaml. Extensions before v1.10 wrote the
# hashes inline in pkg.yaml (v1.9.0): no release followed here is that old, and a vars.yaml without the
# variables is an error, never an unpinned row.
ARCHES = {"amd64": "x86_64", "arm64": "sbsa"}
ARCHIVE_URL = (
    "https://developer.download.nvidia.com/compute/nvidia-driver/redist/nvidia_driver/linux-{nv}/"
    "nvidia_driver-linux-{nv}-{driver}-archive.tar.xz"
)
PKG_YAML = "nvidia-gpu/nvidia-container-toolkit/nvidia-pkgs/{tier}/pkg.yaml"
HEX = {"sha256": re.compile(r"^[0-9a-f]{64}$"), "sha512": re.compile(r"^[0-9a-f]{128}$")}


@dataclass(frozen=True)
class Pin:
    """NVIDIA's driver archive of one driver on one arch: where Talos downloads it and its two hashes."""

    url: str
    sha256: str
    sha512: str


Pins = dict[str, dict[str, Pin]]  # tier (production, lts) -> arch (amd64, arm64) -> its archive


def archive_url(driver: str, arch: str) -> str:
    return ARCHIVE_URL.format(nv=ARCHES[arch], driver=driver)


def pin_vars(tier: str, arch: str) -> tuple[str, str]:
    prefix = f"NVIDIA_PKGS_{tier.upper()}_{arch.upper()}"
    return f"{prefix}_SHA256", f"{prefix}_SHA512"


def pins_from_vars(text: str, drivers_by_tier: dict[str, str]) -> Pins:
    """The archive pins of each tier and arch from one nvidia-gpu/vars.yaml; a variable missing or not a
    hash is a ValueError naming it."""
    pins: Pins = {}
    for tier, driver in drivers_by_tier.items():
        for arch in ARCHES:
            names = pin_vars(tier, arch)
            values = [_var(text, name) for name in names]
            for name, value, kind in zip(names, values, HEX, strict=True):
                if value is None or not HEX[kind].match(value):
                    raise ValueError(f"vars.yaml: {name} is {value!r}, not a {kind} (the archive pin of {driver})")
            pins.setdefault(tier, {})[arch] = Pin(archive_url(driver, arch), values[0] or "", values[1] or "")
    return pins


@dataclass(frozen=True)
class TalosRelease:
    release: str
    extensions_commit: str
    production: str
    lts: str
    pins: Pins = dataclasses.field(default_factory=dict)


def _pins_of(entry: dict[str, dict[str, dict[str, str]]]) -> Pins:
    return {tier: {arch: Pin(**pin) for arch, pin in arches.items()} for tier, arches in entry.items()}


def check_pins(r: TalosRelease) -> None:
    """Every tier and arch pinned, each URL the archive of that tier's driver, each hash well formed."""
    for tier in CHANNELS:
        for arch in ARCHES:
            pin = r.pins.get(tier, {}).get(arch)
            if pin is None:
                raise ValueError(f"{r.release}: no archive pin for {tier} {arch}")
            if pin.url != archive_url(getattr(r, tier), arch):
                raise ValueError(f"{r.release}: {tier} {arch}: {pin.url} is not the archive of {getattr(r, tier)}")
            if not (HEX["sha256"].match(pin.sha256) and HEX["sha512"].match(pin.sha512)):
                raise ValueError(f"{r.release}: {tier} {arch}: a pin is not a sha256 and a sha512")


def driver_pins(releases: list[TalosRelease]) -> dict[tuple[str, str], Pin]:
    """(driver, arch) -> its archive; one driver pinned two ways in two rows is a ValueError (one image is
    built per driver, from one archive)."""
    found: dict[tuple[str, str], tuple[str, Pin]] = {}
    for r in releases:
        for tier, arches in r.pins.items():
            for arch, pin in arches.items():
                key = (getattr(r, tier), arch)
                first = found.setdefault(key, (r.release, pin))
                if first[1] != pin:
                    raise ValueError(f"{key[0]} {arch}: pinned differently in {first[0]} and {r.release}")
    return {key: pin for key, (_, pin) in found.items()}


def load(path: Path = DATA) -> list[TalosRelease]:
    entries = tomllib.loads(path.read_text())["talos"]
    releases = [TalosRelease(**{**entry, "pins": _pins_of(entry.get("pins", {}))}) for entry in entries]
    for r in releases:
        if not TALOS_RELEASE.match(r.release) or not re.fullmatch(r"[0-9a-f]{40}", r.extensions_commit):
            raise ValueError(f"{path}: bad entry {r}")
        for driver in (r.production, r.lts):
            if not DRIVER_VERSION.match(driver):
                raise ValueError(f"{path}: {r.release}: bad driver version {driver!r}")
        check_pins(r)
    if len({r.release for r in releases}) != len(releases):
        raise ValueError(f"{path}: a Talos release is listed twice")
    driver_pins(releases)
    return releases


def shipped_driver(releases: list[TalosRelease], release: str, tier: str) -> str:
    """The driver Talos ``release`` ships on ``tier``; a release or tier the data file lacks is a ValueError."""
    if tier not in CHANNELS:
        raise ValueError(f"tier {tier!r}: one of {', '.join(CHANNELS)}")
    for r in releases:
        if r.release == release:
            return str(getattr(r, tier))
    raise ValueError(f"Talos {release} is not in the release data (release/talos-drivers.toml)")


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


def project_version(pyproject: Path = ROOT / "pyproject.toml") -> str:
    return str(tomllib.loads(pyproject.read_text())["project"]["version"])


def release_key(release: str) -> tuple[int, ...]:
    """Talos release order: a final after its pre-releases, alpha < beta < rc."""
    found = TALOS_RELEASE.match(release)
    if not found:
        raise ValueError(f"not a Talos release: {release!r}")
    numbers = [int(n) for n in re.findall(r"\d+", release)]
    pre = re.search(r"-(alpha|beta|rc)\.", release)
    return (*numbers[:3], 0, PRE_RANK[pre.group(1)], numbers[3]) if pre else (*numbers[:3], 1, 0, 0)


def manager_driver(releases: list[TalosRelease]) -> str:
    """The image the manager tag follows: the production driver of the newest final release (the manager
    code is the same in every image of one project version; its driver does not matter)."""
    finals = [r for r in releases if "-" not in r.release] or releases
    return max(finals, key=lambda r: release_key(r.release)).production


def tags(releases: list[TalosRelease], driver: str, repo: str, project: str | None = None) -> list[str]:
    if driver not in drivers(releases):
        return [f"{repo}:{driver}"]  # no Talos release ships it: nothing to publish
    project = project or project_version()
    names = [driver, f"{driver}-{project}"]
    for r in releases:
        if driver in (r.production, r.lts):
            names += [f"{driver}-talos{r.release}", f"{driver}-{project}-talos{r.release}"]
        for channel in (c for c in CHANNELS if getattr(r, c) == driver):
            # The versioned channel: `version: production-<project version>` is one fixed build per Talos
            # release, and a project release is a one-line change of it (docs/image.md, "Channel or digest").
            names += [f"{channel}-talos{r.release}", f"{channel}-{project}-talos{r.release}"]
    if releases and driver == manager_driver(releases):
        names += [MANAGER, f"{MANAGER}-{project}"]
    return [f"{repo}:{name}" for name in dict.fromkeys(names)]


def _git(git_dir: str, *args: str) -> str:
    done = subprocess.run(["git", "-C", git_dir, *args], capture_output=True, text=True, check=True, timeout=60)
    return done.stdout


def _var(text: str, name: str) -> str | None:
    found = re.search(rf"^{name}:\s*\"?([^\"\s]+)", text, re.M)
    return found.group(1) if found else None


def _show(git_dir: str, commit: str, path: str) -> str:
    return _git(git_dir, "show", f"{commit}:{path}")


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
        problems += [f"{r.release}: {p}" for p in _verify_pins(r, text, functools.partial(_show, git_dir, commit))]
    return problems


def _verify_pins(r: TalosRelease, vars_text: str, show: Callable[[str], str]) -> list[str]:
    """The row's archive pins against vars.yaml, and nvidia-pkgs/<tier>/pkg.yaml still downloading that URL
    with those variables (``show``: a file of the release's commit)."""
    try:
        read = pins_from_vars(vars_text, {"production": r.production, "lts": r.lts})
    except ValueError as error:
        return [str(error)]
    problems = [
        f"{tier} {arch}: vars.yaml pins {read[tier][arch]}, the data file {r.pins.get(tier, {}).get(arch)}"
        for tier in CHANNELS
        for arch in ARCHES
        if r.pins.get(tier, {}).get(arch) != read[tier][arch]
    ]
    for tier in CHANNELS:
        path, version = PKG_YAML.format(tier=tier), "{{ ." + f"NVIDIA_DRIVER_{tier.upper()}_VERSION" + " }}"
        try:
            pkg = show(path)
        except subprocess.CalledProcessError:
            problems.append(f"{path}: missing")
            continue
        for arch in ARCHES:
            wanted = [archive_url(version, arch), *("{{ ." + name + " }}" for name in pin_vars(tier, arch))]
            problems += [f"{path} no longer names {w}" for w in wanted if w not in pkg]
    return problems


def remote_releases(ls_remote: str) -> dict[str, str]:
    """Release tag -> commit, from `git ls-remote --tags` (an annotated tag's peeled ^{} line wins)."""
    found: dict[str, str] = {}
    for line in ls_remote.splitlines():
        commit, _, ref = line.partition("\t")
        name = ref.removeprefix("refs/tags/")
        peeled = name.endswith("^{}")
        name = name.removesuffix("^{}")
        if re.fullmatch(r"[0-9a-f]{40}", commit) and TALOS_RELEASE.match(name) and (peeled or name not in found):
            found[name] = commit
    return found


def followed(names: list[str]) -> list[str]:
    """Releases v1.12.0 and later; a minor's newest pre-release only while that minor has no final."""
    keys = {n: release_key(n) for n in names if release_key(n)[:3] >= FIRST_RELEASE}
    finals = {k[:2] for k in keys.values() if k[3] == 1}
    newest_pre: dict[tuple[int, ...], str] = {}
    for n in sorted((n for n, k in keys.items() if k[3] == 0 and k[:2] not in finals), key=release_key):
        newest_pre[keys[n][:2]] = n
    return sorted([n for n, k in keys.items() if k[3] == 1] + list(newest_pre.values()), key=release_key)


@dataclass(frozen=True)
class Plan:
    rows: list[TalosRelease]  # the updated data file
    added: list[str]  # Talos releases new in it
    dropped: list[str]  # pre-releases their final (or a newer pre-release) superseded
    build: list[str]  # drivers with no image of this project version yet
    tag: dict[str, list[str]]  # existing tag (its digest) -> the tags to add to it, no rebuild

    def report(self) -> dict[str, object]:
        return {"added": self.added, "dropped": self.dropped, "build": self.build, "tag": self.tag}


def plan(
    current: list[TalosRelease], remote: dict[str, str], vars_text: dict[str, str], published: set[str], project: str
) -> Plan:
    known = {r.release: r for r in current}
    wanted = followed(list(remote) + list(known))
    rows: list[TalosRelease] = []
    for name in wanted:
        if name in known:
            rows.append(known[name])
            continue
        if name not in vars_text:
            raise ValueError(f"{name}: new Talos release, but no nvidia-gpu/vars.yaml given for it")
        text = vars_text[name]
        production, lts = _var(text, "NVIDIA_DRIVER_PRODUCTION_VERSION"), _var(text, "NVIDIA_DRIVER_LTS_VERSION")
        if not (production and lts and DRIVER_VERSION.match(production) and DRIVER_VERSION.match(lts)):
            raise ValueError(f"{name}: vars.yaml names no production and LTS driver ({production}, {lts})")
        try:
            pins = pins_from_vars(text, {"production": production, "lts": lts})
        except ValueError as error:
            raise ValueError(f"{name}: {error}") from None
        rows.append(TalosRelease(name, remote[name], production, lts, pins))
    driver_pins(rows)  # a new row must pin an already listed driver as the older rows do
    build = [d for d in drivers(rows) if f"{d}-{project}" not in published]
    to_tag: dict[str, list[str]] = {}
    for driver in drivers(rows):
        missing = [t[1:] for t in tags(rows, driver, "", project) if t[1:] not in published]
        if missing and driver not in build:  # a build pushes every tag of its driver itself
            to_tag[f"{driver}-{project}"] = missing
    added = [r.release for r in rows if r.release not in known]
    dropped = [r.release for r in current if r.release not in wanted]
    return Plan(rows, added, dropped, build, to_tag)


def render(rows: list[TalosRelease], header: str) -> str:
    """The data file: its comment header as it was, then one table per release."""
    tables = [
        f'[[talos]]\nrelease = "{r.release}"\nextensions_commit = "{r.extensions_commit}"\n'
        f'production = "{r.production}"\nlts = "{r.lts}"\n'
        + "".join(
            f'[talos.pins.{tier}.{arch}]\nurl = "{pin.url}"\nsha256 = "{pin.sha256}"\nsha512 = "{pin.sha512}"\n'
            for tier in CHANNELS
            for arch, pin in r.pins.get(tier, {}).items()
        )
        for r in rows
    ]
    return header + "\n" + "\n".join(tables)


def header_of(path: Path) -> str:
    return "".join(line for line in path.read_text().splitlines(keepends=True) if line.startswith("#"))


def _plan_command(argv: list[str], data: Path) -> int:
    parser = argparse.ArgumentParser(prog="release-matrix.py plan")
    parser.add_argument("--tags", type=Path, required=True)
    parser.add_argument("--vars-dir", type=Path, required=True)
    parser.add_argument("--published", type=Path, required=True)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)
    remote = remote_releases(args.tags.read_text())
    vars_text = {f.stem: f.read_text() for f in sorted(args.vars_dir.glob("*.yaml")) if f.is_file()}
    published = {line.strip() for line in args.published.read_text().splitlines() if line.strip()}
    result = plan(load(data), remote, vars_text, published, project_version())
    if args.write:
        data.write_text(render(result.rows, header_of(data)))
    print(json.dumps(result.report(), indent=1))
    return 0


def pins_lines(releases: list[TalosRelease], driver: str, arch: str) -> list[str]:
    """The Dockerfile's build arguments for the archive of ``driver`` on ``arch``."""
    if arch not in ARCHES:
        raise ValueError(f"arch {arch!r}: one of {', '.join(ARCHES)}")
    pin = driver_pins(releases).get((driver, arch))
    if pin is None:
        raise ValueError(f"{driver}: no Talos release in the release data ships it, so it has no pinned archive")
    return [
        f"NVIDIA_ARCHIVE_URL={pin.url}",
        f"NVIDIA_ARCHIVE_SHA256={pin.sha256}",
        f"NVIDIA_ARCHIVE_SHA512={pin.sha512}",
    ]


def main(argv: list[str], data: Path = DATA) -> int:
    if argv[:1] == ["plan"]:
        try:
            return _plan_command(argv[1:], data)
        except (OSError, ValueError) as error:
            print(f"release-matrix.py plan: {error}", file=sys.stderr)
            return 1
    try:
        releases = load(data)
        match argv:
            case ["pins", driver, arch]:
                print("\n".join(pins_lines(releases, driver, arch)))
                return 0
            case ["driver", release, tier]:
                print(shipped_driver(releases, release, tier))
                return 0
    except ValueError as error:
        print(f"release-matrix.py {' '.join(argv[:1])}: {error}", file=sys.stderr)
        return 1
    match argv:
        case ["pending", "--tags", ls_remote]:
            remote = remote_releases(Path(ls_remote).read_text())
            known = {r.release for r in releases}
            for name in (n for n in followed(list(remote)) if n not in known and n in remote):
                print(name, remote[name])
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
    # RELEASE_DATA: another data file (scripts/release-follow.sh and its tests; default the repository's).
    sys.exit(main(sys.argv[1:], Path(os.environ.get("RELEASE_DATA") or DATA)))
