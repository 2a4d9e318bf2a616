"""The image is built from pinned inputs only (Dockerfile, docs/image.md): the base image by digest, its Python
packages from requirements/image.txt with a hash each (pip --require-hashes) and in step with pyproject's
dependencies, NVIDIA's archive by its sha256 and sha512 (release/talos-drivers.toml through
`scripts/release-matrix.py pins`)."""

from __future__ import annotations

import re
import tomllib

from helpers.release import release_matrix
from helpers.support import REPO, require_module

packaging_requirements = require_module("packaging.requirements", how="pip install -e '.[test]'")
LOCK = REPO / "requirements" / "image.txt"
DOCKERFILE = (REPO / "Dockerfile").read_text()
rm = release_matrix()


def _locked() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, sha256 hashes) of every requirement of the lock file."""
    text = re.sub(r"\\\n\s*", " ", LOCK.read_text())
    locked = {}
    for line in (raw.strip() for raw in text.splitlines()):
        if not line or line.startswith("#"):
            continue
        requirement, *options = line.split()
        name, _, version = requirement.partition("==")
        assert version, f"{requirement}: not pinned with =="
        hashes = [o.removeprefix("--hash=sha256:") for o in options if o.startswith("--hash=sha256:")]
        assert len(hashes) == len(options), f"{requirement}: an option that is not a sha256 hash"
        locked[name.lower().replace("_", "-")] = (version, hashes)
    return locked


def test_every_locked_package_has_a_version_and_a_sha256() -> None:
    locked = _locked()
    assert len(locked) >= 10
    for name, (_version, hashes) in locked.items():
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), name


def test_the_lock_satisfies_every_dependency_of_pyproject() -> None:
    locked = _locked()
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert dependencies
    for spec in dependencies:
        requirement = packaging_requirements.Requirement(spec)
        name = requirement.name.lower().replace("_", "-")
        assert name in locked, f"{name} (pyproject.toml) is not in {LOCK.name}"
        assert requirement.specifier.contains(locked[name][0]), f"{name}=={locked[name][0]} is not {spec}"


def test_the_image_installs_the_lock_with_require_hashes_and_builds_from_a_digest() -> None:
    assert "--require-hashes --no-deps -r /src/requirements/image.txt" in DOCKERFILE
    installs = [line for line in DOCKERFILE.splitlines() if '"$pip" install' in line and "requirements" in line]
    assert len(installs) == 2 and all("--require-hashes" in line for line in installs)  # offline and index
    (base,) = re.findall(r"^ARG BASE_IMAGE=(\S+)$", DOCKERFILE, re.MULTILINE)
    assert re.fullmatch(r"debian:bookworm-slim@sha256:[0-9a-f]{64}", base), base
    assert "!requirements/image.txt" in (REPO / ".dockerignore").read_text()
