"""The image is built from pinned inputs only (Dockerfile, docs/image.md): the base image by digest, its Python
packages from requirements/image.txt with a hash each (pip --require-hashes) and in step with pyproject's
dependencies, NVIDIA's archive by its sha256 and sha512 (release/talos-drivers.toml through
`scripts/release-matrix.py pins`)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
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


ROWS = """
[[talos]]
release = "v1.14.0"
extensions_commit = "26822f5c95ab96da26eedfeb83c5a035b48670a4"
production = "595.91.07"
lts = "580.178.04"
[talos.archive.production.amd64]
sha256 = "93e0487897e843be767a3d259dffea8ac32dffff846e83df8d3abbf30be754ae"
sha512 = "a7cb"
[talos.archive.lts.arm64]
url = "https://example.invalid/lts.tar.xz"
sha256 = "8e55"
sha512 = "05fa"
"""


def test_pins_reads_the_archive_of_a_driver_and_arch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "talos-drivers.toml"
    data.write_text(ROWS)
    assert rm.pins(data, "595.91.07", "amd64") == {
        "NVIDIA_ARCHIVE_URL": "https://developer.download.nvidia.com/compute/nvidia-driver/redist/nvidia_driver/"
        "linux-x86_64/nvidia_driver-linux-x86_64-595.91.07-archive.tar.xz",
        "NVIDIA_ARCHIVE_SHA256": "93e0487897e843be767a3d259dffea8ac32dffff846e83df8d3abbf30be754ae",
        "NVIDIA_ARCHIVE_SHA512": "a7cb",
    }
    assert rm.pins(data, "580.178.04", "arm64")["NVIDIA_ARCHIVE_URL"] == "https://example.invalid/lts.tar.xz"
    assert rm.pins(data, "595.91.07", "arm64") is None  # no arm64 pins recorded for it
    assert rm.main(["pins", "580.178.04", "arm64"], data) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["NVIDIA_ARCHIVE_SHA256=8e55", "NVIDIA_ARCHIVE_SHA512=05fa"]
    assert rm.main(["pins", "595.91.07", "arm64"], data) == 1
    assert "no Talos release records the arm64 archive of 595.91.07" in capsys.readouterr().err
