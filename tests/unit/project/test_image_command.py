"""`make image TALOS=… TIER=… REGISTRY=…` (scripts/image.sh over scripts/release-build.sh): the driver of that
Talos release and tier from the release data, one buildx build of amd64 and arm64 pushed, a cosign
signature where cosign is on PATH, and the digest with the NVIDIADriver and helm lines that use it; PUSH=0
builds only, --dry-run runs nothing, an empty digest is an error (docs/image.md, "Your own image").
Docker and cosign are fakes on PATH that record their argv; nothing reaches a network."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers.support import REPO

SCRIPT = REPO / "scripts" / "image.sh"
DIGEST = "sha256:" + "ab" * 32
REGISTRY = "ghcr.io/acme"
IMAGE = f"{REGISTRY}/talos-nvidia-driver"

# docker: `buildx build … --metadata-file F` writes FAKE_DIGEST as BuildKit's containerimage.digest (none when
# empty); `buildx imagetools inspect` finds nothing published; `image inspect` gives a size.
FAKE_DOCKER = """#!/usr/bin/env bash
printf '%s\\n' "docker $*" >>"$FAKE_LOG"
case "$1 $2 ${3:-}" in
  "buildx imagetools inspect") exit 1 ;;
  "buildx build "*)
    while (($#)); do
      if [[ "$1" == --metadata-file ]]; then
        if [[ -n "$FAKE_DIGEST" ]]; then printf '{"containerimage.digest": "%s"}' "$FAKE_DIGEST" >"$2"
        else printf '{}' >"$2"; fi
      fi
      shift
    done ;;
  "image inspect "*) echo 123456789 ;;
esac
exit 0
"""
FAKE_COSIGN = """#!/usr/bin/env bash
printf '%s\\n' "cosign $*" >>"$FAKE_LOG"
"""


def _path_without_cosign() -> str:
    """PATH without any directory holding a real cosign (the fake decides whether one is there)."""
    return os.pathsep.join(
        d for d in os.environ.get("PATH", os.defpath).split(os.pathsep) if d and not shutil.which("cosign", path=d)
    )


def _run(
    tmp: Path, *args: str, cosign: bool = True, digest: str = DIGEST, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "docker").write_text(FAKE_DOCKER)
    (bindir / "docker").chmod(0o755)
    if cosign:
        (bindir / "cosign").write_text(FAKE_COSIGN)
        (bindir / "cosign").chmod(0o755)
    log = tmp / "calls.log"
    log.write_text("")
    run_env = {k: v for k, v in os.environ.items() if k not in {"PUSH", "PLATFORMS", "COSIGN_KEY", "IMAGE_REPO"}}
    run_env |= {"PATH": f"{bindir}{os.pathsep}{_path_without_cosign()}", "FAKE_LOG": str(log)}
    run_env |= {"FAKE_DIGEST": digest, "TMPDIR": str(tmp), **(env or {})}
    done = subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=run_env, timeout=120, check=False
    )
    return done, log.read_text().splitlines()


def _sed_line(out: str) -> str:
    """The printed NVIDIADriver command, its continuation joined, without the `| kubectl apply` part."""
    joined = out.replace("\\\n", "")
    (line,) = [ln for ln in joined.splitlines() if ln.startswith("sed ") and "nvidiadriver.yaml" in ln]
    return line.split(" | kubectl apply -f -")[0].strip()


def _applied(out: str) -> dict[str, object]:
    """docs/deploy/nvidiadriver.yaml as the printed sed line rewrites it (run for real, from the repository)."""
    done = subprocess.run(
        ["bash", "-c", _sed_line(out)], cwd=REPO, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    (doc,) = [d for d in yaml.safe_load_all(done.stdout) if d]
    return dict(doc)


def test_push_builds_both_platforms_signs_and_prints_the_digest_and_the_lines(tmp_path: Path) -> None:
    done, calls = _run(tmp_path, "v1.13.9", "lts", REGISTRY)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Talos v1.13.9, lts tier: NVIDIA driver 580.178.04" in out
    assert f"digest: {DIGEST}\n" in out and "signed: yes" in out
    (build,) = [c for c in calls if c.startswith("docker buildx build ")]
    assert "--platform linux/amd64,linux/arm64 --push" in build
    assert f"-t {IMAGE}:580.178.04 " in build and f"-t {IMAGE}:lts-talosv1.13.9 " in build
    assert "--build-arg DRIVER_VERSION=580.178.04" in build
    assert calls[-1] == f"cosign sign --yes {IMAGE}@{DIGEST}"
    cr = _applied(out)
    spec = cr["spec"]
    assert isinstance(spec, dict)
    assert (spec["repository"], spec["image"], spec["version"]) == (REGISTRY, "talos-nvidia-driver", DIGEST)
    assert (spec["manager"]["repository"], spec["manager"]["version"]) == (REGISTRY, DIGEST)
    helm = out.replace("\\\n", "").splitlines()
    (policy,) = [ln for ln in helm if ln.startswith("helm install") and "driver.repository" in ln]
    for setting in (f"driver.repository={REGISTRY}", f"driver.version={DIGEST}", f"driver.manager.version={DIGEST}"):
        assert f"--set {setting}" in policy
    (crd,) = [ln for ln in helm if ln.startswith("helm install") and "nvidiaDriverCRD.enabled=true" in ln]
    assert "-f docs/deploy/gpu-operator-values.yaml" in crd and "--version v26.7.0" in crd


def test_without_cosign_the_push_says_it_is_unsigned(tmp_path: Path) -> None:
    done, calls = _run(tmp_path, "v1.13.9", "production", REGISTRY, cosign=False)
    assert done.returncode == 0, done.stderr
    assert f"digest: {DIGEST}\n" in done.stdout and "signed: no (cosign not on PATH)" in done.stdout
    assert "NOT signed: no cosign on PATH" in done.stderr and not [c for c in calls if c.startswith("cosign")]


@pytest.mark.parametrize("digest", ["", "sha256:", "latest"])
def test_a_push_without_a_digest_fails_and_prints_no_lines(tmp_path: Path, digest: str) -> None:
    done, calls = _run(tmp_path, "v1.13.9", "production", REGISTRY, digest=digest)
    assert done.returncode == 1
    assert "the push reported no image digest" in done.stderr
    assert "digest:" not in done.stdout and "kubectl apply" not in done.stdout
    assert not [c for c in calls if c.startswith("cosign")]  # nothing signed either


def test_push_0_builds_without_pushing_and_says_there_is_no_digest(tmp_path: Path) -> None:
    native = "amd64" if os.uname().machine == "x86_64" else "arm64"
    # a fresh clone has no .cache: the build log's directory is made, not assumed
    env = {"PUSH": "0", "PLATFORMS": f"linux/{native}", "BUILD_LOG": str(tmp_path / "no-such-dir" / "build.log")}
    done, calls = _run(tmp_path, "v1.12.11", "production", REGISTRY, env=env)
    assert done.returncode == 0, done.stderr
    builds = [c for c in calls if c.startswith("docker buildx build ")]
    assert len(builds) == 1 and "--load" in builds[0] and "--push" not in builds[0]
    assert f"-t {IMAGE}:570.211.01 " in builds[0] + " "
    assert (tmp_path / "no-such-dir" / "build.log").is_file()
    assert "digest: none: PUSH=0 pushed nothing" in done.stdout
    assert not re.search(r"^digest: *$", done.stdout, re.M)
    spec = _applied(done.stdout)["spec"]
    assert isinstance(spec, dict)
    # no digest: the tier's channel, and the manager from the driver tag (pushed with every driver)
    assert (spec["repository"], spec["version"], spec["manager"]["version"]) == (REGISTRY, "production", "570.211.01")


def test_dry_run_runs_nothing_and_make_passes_the_arguments(tmp_path: Path) -> None:
    done, calls = _run(tmp_path, "--dry-run", "v1.14.0-rc.1", "production", REGISTRY)
    assert done.returncode == 0, done.stderr
    assert calls == []
    assert "Talos v1.14.0-rc.1, production tier: NVIDIA driver 595.91.07" in done.stdout
    assert "scripts/release-build.sh 595.91.07 push" in done.stdout and "linux/amd64,linux/arm64" in done.stdout
    assert "digest: none: dry run" in done.stdout
    dry = subprocess.run(
        ["make", "-n", "-C", str(REPO), "image", "TALOS=v1.13.9", "TIER=lts", "REGISTRY=r.io/x", "DRY_RUN=1"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert "PUSH='1' bash scripts/image.sh --dry-run 'v1.13.9' 'lts' 'r.io/x'" in dry.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("v1.13.9", "production"), "usage:"),
        (("", "production", REGISTRY), "TALOS is empty"),
        (("v1.13.9", "beta", REGISTRY), "TIER is 'beta': production or lts"),
        (("v1.13.9", "lts", ""), "REGISTRY is empty"),
        (("v1.13.9", "lts", "registry.invalid"), "the samples' placeholder"),
        (("v1.13.9", "lts", "https://ghcr.io/acme"), "not a lower-case registry path"),
        (("v1.13.9", "lts", "ghcr.io/ACME"), "not a lower-case registry path"),
        (("v1.11.0", "lts", REGISTRY), "Talos v1.11.0 is not in the release data"),
    ],
)
def test_bad_arguments_are_refused_before_any_build(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    done, calls = _run(tmp_path, *args)
    assert done.returncode == 1 and message in done.stderr, done.stderr
    assert calls == [] and done.stdout == ""


def test_the_quickstart_build_block_takes_the_printed_digest_and_stops_on_an_empty_one(tmp_path: Path) -> None:
    text = (REPO / "docs/quickstart.md").read_text()
    (block,) = [b for b in re.findall(r"^```sh\n(.*?)^```$", text, re.S | re.M) if "make image TALOS=" in b]
    # the block with `make image` answered by the script's real output (fake docker), then its digest lookup
    printed, _ = _run(tmp_path, "v1.13.9", "production", REGISTRY)
    assert printed.returncode == 0, printed.stderr
    for output, ok in ((printed.stdout, True), ("digest: none: PUSH=0 pushed nothing\n", False)):
        fake_make = tmp_path / "bin" / "make"
        (tmp_path / "printed").write_text(output)
        fake_make.write_text(f"#!/bin/sh\ncat {tmp_path / 'printed'}\n")
        fake_make.chmod(0o755)
        script = f"TALOS=v1.13.9 TIER=production REGISTRY={REGISTRY}\n{block}\necho DIGEST=$DIGEST\n"
        env = {"PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
        done = subprocess.run(
            ["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=30, check=False
        )
        if ok:
            assert done.returncode == 0 and f"DIGEST={DIGEST}" in done.stdout, done.stderr
        else:
            assert done.returncode != 0 and "make image printed no digest" in done.stderr
            assert "DIGEST=" not in done.stdout


def test_no_owner_placeholder_is_left_in_the_docs_the_samples_or_the_workflows() -> None:
    paths = [REPO / "README.md", *(REPO / "docs").rglob("*"), *(REPO / ".github").rglob("*")]
    found = [
        f"{p.relative_to(REPO)}:{n}"
        for p in paths
        if p.is_file()
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if "OWNER" in line.replace("GITHUB_REPOSITORY_OWNER", "")
    ]
    assert found == []
