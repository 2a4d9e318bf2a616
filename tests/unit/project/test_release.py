"""The release matrix (release/talos-drivers.toml) stays true to the drivers Talos ships, and the release
workflow, the local build script, CI and the docs agree with it (docs/image.md)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers.release import release_matrix
from helpers.support import REPO, require, require_module

yaml = require_module("yaml")

SCRIPT = REPO / "scripts" / "release-build.sh"
WORKFLOW = REPO / ".github" / "workflows" / "release.yml"
PUBLISHED = "registry.invalid/talos-nvidia-driver"  # the samples' placeholder registry (docs/deploy)
DOCKER_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


rm = release_matrix()
V1_13_9 = next(r for r in rm.load() if r.release == "v1.13.9")
# v1.13.9's archive pins as its vars.yaml names them (the fixture of a v1.13.10 that keeps its drivers)
PKGS_VARS = "".join(
    line + "\n"
    for line in (REPO / "tests/fixtures/release/vars/v1.13.10.yaml").read_text().splitlines()
    if line.startswith("NVIDIA_PKGS_")
)


def test_every_talos_release_gets_both_of_its_drivers_tagged() -> None:
    releases = rm.load()
    assert {r.release for r in releases} >= {"v1.12.0", "v1.12.11", "v1.13.9", "v1.14.0-rc.1"}
    for r in releases:
        for driver in (r.production, r.lts):
            assert f"{PUBLISHED}:{driver}-talos{r.release}" in rm.tags(releases, driver, PUBLISHED)
    drivers = [entry["driver"] for entry in rm.matrix(releases)["include"]]
    assert drivers == sorted({d for r in releases for d in (r.production, r.lts)}, key=rm.version_key)
    assert all(DOCKER_TAG.match(t.split(":", 1)[1]) for d in drivers for t in rm.tags(releases, d, PUBLISHED))


def test_the_12_branch_quirk_is_recorded() -> None:
    # Talos 1.12: the production branch (570) is older than the LTS branch (580); nothing may "fix" it.
    (r,) = [r for r in rm.load() if r.release == "v1.12.11"]
    assert (r.production, r.lts) == ("570.211.01", "580.126.20")


def test_talos_doc_table_agrees_with_the_release_data() -> None:
    shipped = {r.release: (r.production, r.lts) for r in rm.load()}
    text = (REPO / "docs" / "talos.md").read_text()
    rows = re.findall(r"^\| (v1\.[^|]*?) \| [^|]+ \| (\d[\d.]+) / (\d[\d.]+) \|$", text, re.M)
    checked = 0
    for cell, production, lts in rows:
        for release in re.findall(r"v1\.\d+\.\d+(?:-rc\.\d+)?", cell.split("(")[0]):
            if release in shipped:
                assert shipped[release] == (production, lts), release
                checked += 1
    assert checked >= 6


def _git(repo: Path, *args: str) -> None:
    env = os.environ | {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env, timeout=60)


def _extensions_repo(tmp_path: Path, production: str, lts_var: str = "NVIDIA_DRIVER_LTS_VERSION") -> Path:
    """A siderolabs/extensions-shaped clone with one release tag (the files verify reads)."""
    repo = tmp_path / "extensions"
    (repo / "nvidia-gpu").mkdir(parents=True)
    (repo / "nvidia-gpu/vars.yaml").write_text(
        f"NVIDIA_DRIVER_LTS_VERSION: 580.178.04\nNVIDIA_DRIVER_PRODUCTION_VERSION: {production}\n{PKGS_VARS}"
    )
    for tier in rm.CHANNELS:  # nvidia-pkgs/<tier>/pkg.yaml: the archive URL of each arch and its pin variables
        pkg = repo / rm.PKG_YAML.format(tier=tier)
        pkg.parent.mkdir(parents=True, exist_ok=True)
        version = "{{ ." + f"NVIDIA_DRIVER_{tier.upper()}_VERSION" + " }}"
        lines = []
        for arch in rm.ARCHES:
            sha256, sha512 = rm.pin_vars(tier, arch)
            lines += [f"  - url: {rm.archive_url(version, arch)}", f"    sha256: {{{{ .{sha256} }}}}"]
            lines += [f"    sha512: {{{{ .{sha512} }}}}"]
        pkg.write_text("\n".join(lines) + "\n")
    for path, var in rm.KMOD_VARS.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        used = lts_var if var == "NVIDIA_DRIVER_LTS_VERSION" else var
        (repo / path).write_text(f'VERSION: "{{{{ .{used} }}}}-{{{{ .BUILD_ARG_TAG }}}}"\n')
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "release")
    _git(repo, "tag", "v1.13.9")
    return repo


def _head(repo: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()


def _v1_13_9(commit: str) -> Any:
    return rm.TalosRelease("v1.13.9", commit, "595.91.07", "580.178.04", V1_13_9.pins)


def test_verify_accepts_the_vars_it_was_read_from_and_names_each_difference(tmp_path: Path) -> None:
    require(shutil.which("git"), "git")
    good = _extensions_repo(tmp_path / "good", "595.91.07")
    releases = [_v1_13_9(_head(good))]
    assert rm.verify(releases, str(good)) == []
    bumped = _extensions_repo(tmp_path / "bumped", "595.99.01")
    (problem,) = rm.verify([_v1_13_9(_head(bumped))], str(bumped))  # its pins unchanged: the driver only
    assert "NVIDIA_DRIVER_PRODUCTION_VERSION is 595.99.01" in problem
    assert "tag is" in rm.verify(releases, str(bumped))[0]  # another commit behind the tag
    renamed = _extensions_repo(tmp_path / "renamed", "595.91.07", lts_var="NVIDIA_DRIVER_LTS2_VERSION")
    problems = rm.verify([_v1_13_9(_head(renamed))], str(renamed))
    assert len(problems) == 2 and all("no longer takes its VERSION" in p for p in problems)


def test_verify_names_a_changed_archive_pin_and_a_pkg_yaml_that_no_longer_uses_it(tmp_path: Path) -> None:
    require(shutil.which("git"), "git")
    repo = _extensions_repo(tmp_path / "moved", "595.91.07")
    sha256 = V1_13_9.pins["lts"]["arm64"].sha256
    vars_yaml = repo / "nvidia-gpu/vars.yaml"
    vars_yaml.write_text(vars_yaml.read_text().replace(sha256, "e" * 64))
    pkg = repo / rm.PKG_YAML.format(tier="production")
    pkg.write_text(pkg.read_text().replace("linux-sbsa", "linux-aarch64"))
    _git(repo, "commit", "-q", "-am", "moved")
    _git(repo, "tag", "-f", "v1.13.9")
    problems = rm.verify([_v1_13_9(_head(repo))], str(repo))
    assert len(problems) == 2, problems
    assert problems[0].startswith("v1.13.9: lts arm64: vars.yaml pins") and "e" * 64 in problems[0]
    assert "pkg.yaml no longer names https://" in problems[1] and "linux-sbsa" in problems[1]


def _workflow() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text())
    return doc


def _steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(job["steps"])


def test_workflow_builds_each_driver_multi_arch_with_the_local_script() -> None:
    jobs = _workflow()["jobs"]
    assert "release-matrix.py matrix" in " ".join(s.get("run", "") for s in _steps(jobs["matrix"]))
    image = jobs["image"]
    assert set(image["needs"]) == {"suite", "matrix"}  # the whole suite passes before anything is pushed
    assert "bash .ci/run" in [s.get("run") for s in _steps(jobs["suite"])]
    assert image["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.matrix) }}"
    assert set(image["env"]["PLATFORMS"].split(",")) == {"linux/amd64", "linux/arm64"}
    assert image["env"]["USERSPACE_SOURCE"] == "archive"
    uses = [s["uses"].split("@")[0] for s in _steps(image) if "uses" in s]
    for action in (
        "docker/setup-qemu-action",
        "docker/setup-buildx-action",
        "docker/login-action",
        "sigstore/cosign-installer",
    ):
        assert action in uses
    runs = [s for s in _steps(image) if "scripts/release-build.sh" in s.get("run", "")]
    # The driver reaches the script through the environment: a matrix value never becomes shell code (zizmor).
    assert [r["run"].split('"$DRIVER"')[1].split() for r in runs] == [["build", "test"], ["push"]]
    assert all(r["env"]["DRIVER"] == "${{ matrix.driver }}" for r in runs)
    assert runs[1]["env"]["PUSH"] == "1" and "if" in runs[1]  # pushes on a release tag only
    assert image["permissions"] == {"contents": "read", "packages": "write", "id-token": "write"}
    # Every step runs bash scripts; nothing but the set-up actions lives in the workflow itself.
    assert all(
        s.get("run", "").startswith(("bash scripts/", "echo ", "python -m venv")) for s in _steps(image) if "run" in s
    )


def test_ci_builds_and_tests_the_image_through_the_release_script() -> None:
    setup = (REPO / "scripts" / "setup.sh").read_text().replace("\\\n", " ")
    test = (REPO / "scripts" / "test.sh").read_text().replace("\\\n", " ")
    builds = [line for line in setup.splitlines() if "bash scripts/release-build.sh" in line]
    (tree,) = [line for line in builds if 'LOCAL_TAG="$IMAGE_TREE"' in line]
    (archive,) = [line for line in builds if 'LOCAL_TAG="$IMAGE_ARCHIVE"' in line]
    assert "USERSPACE_SOURCE=tree" in tree and "USERSPACE_SOURCE=archive" in archive
    # The archive route's build gets both pins of the archive CI made (a wrong one: test_archive_image.py).
    assert 'NVIDIA_ARCHIVE_SHA256="$(cat "$ARCHIVE.sha256")"' in archive and "$ARCHIVE.sha512" in archive
    assert all(b.split("release-build.sh 535.309.01")[1].split()[0] == "build" for b in builds)
    (run,) = [line for line in test.splitlines() if "bash scripts/release-build.sh" in line]
    assert run.split("release-build.sh 535.309.01")[1].split()[:2] == ["test", "push"]
    assert "PUSH" not in run  # stops before the push: no registry here


def test_push_phase_without_push_says_what_it_would_push() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PUSH"} | {"IMAGE_REPO": PUBLISHED}
    done = subprocess.run(
        ["bash", str(SCRIPT), "595.91.07", "push"], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "push skipped" in done.stderr and f"{PUBLISHED}:595.91.07-talosv1.13.9" in done.stderr
    bad = subprocess.run(["bash", str(SCRIPT), "latest"], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 1 and "usage" in bad.stderr


@pytest.mark.parametrize("name", ["nvidiadriver.yaml", "gpu-operator-values.yaml"])
def test_deploy_examples_use_the_published_image(name: str) -> None:
    (doc,) = [d for d in yaml.safe_load_all((REPO / "docs/deploy" / name).read_text()) if d]
    spec = doc["spec"] if name == "nvidiadriver.yaml" else doc["driver"]
    releases = rm.load()
    assert f"{spec['repository']}/{spec['image']}" == PUBLISHED
    published = {t for d in rm.drivers(releases) for t in rm.tags(releases, d, PUBLISHED)}
    # A channel: the operator appends -talos<release>, and every release's channel tag is published.
    assert spec["version"] in rm.CHANNELS
    assert all(f"{PUBLISHED}:{spec['version']}-talos{r.release}" in published for r in releases)
    manager = spec["manager"]
    assert f"{PUBLISHED}:{manager['version']}" in published and manager["version"] == rm.MANAGER


def test_standalone_example_uses_a_published_tag() -> None:
    docs = yaml.safe_load_all((REPO / "docs/deploy/standalone-daemonset.yaml").read_text())
    (ds,) = [d for d in docs if d and d["kind"] == "DaemonSet"]
    image = ds["spec"]["template"]["spec"]["containers"][0]["image"]
    repo, _, tag = image.rpartition(":")
    assert image in rm.tags(rm.load(), tag.split("-")[0], repo) and repo == PUBLISHED


def test_every_channel_tag_has_an_immutable_versioned_twin_and_the_follow_plan_adds_it() -> None:
    """`version: production-<project version>` (docs/image.md, "Channel or digest"): for every Talos release R
    and branch, `<channel>-<project>-talosR` names the image of the driver R ships on that branch, beside
    the moving `<channel>-talosR`, and the daily plan adds it to an existing image that lacks it."""
    releases, project = rm.load(), rm.project_version()
    published = {t for d in rm.drivers(releases) for t in rm.tags(releases, d, "R", project)}
    for r in releases:
        for channel in rm.CHANNELS:
            driver = getattr(r, channel)
            assert f"R:{channel}-{project}-talos{r.release}" in rm.tags(releases, driver, "R", project)
            assert f"R:{channel}-talos{r.release}" in rm.tags(releases, driver, "R", project)
    versioned = {t for t in published if re.fullmatch(rf"R:(production|lts)-{re.escape(project)}-talos\S+", t)}
    assert len(versioned) == sum(len({"production", "lts"}) for _ in releases)
    # An image of this project version published before: only its versioned channel tags are missing.
    before = {t.removeprefix("R:") for t in published - versioned}
    current = rm.remote_releases("".join(f"{r.extensions_commit}\trefs/tags/{r.release}\n" for r in releases))
    plan = rm.plan(releases, current, {}, before, project)
    assert plan.build == [] and {f"R:{t}" for tags in plan.tag.values() for t in tags} == versioned
    (r,) = [r for r in releases if r.release == "v1.13.9"]
    assert plan.tag[f"{r.production}-{project}"][:1] == [f"production-{project}-talosv1.13.9"]
    text = (REPO / "docs/image.md").read_text()
    assert "`production-<project version>-talos<R>`, `lts-<project version>-talos<R>`" in text
    assert f"`production-{project}-talosv1.13.9` ({r.production})" in text
    assert "versioned channel: `version: production-<project version>`" in text
    assert "`imagePullPolicy: IfNotPresent`" in text  # the moving channel's caveat
