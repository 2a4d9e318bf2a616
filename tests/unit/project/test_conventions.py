"""The repository's conventions: license files, changelog and release notes, security policy, one version
source, pinned workflow actions without kept credentials, Dependabot, the cosign identity of every
publishing workflow, and the repository linters in the quick lane."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from helpers.support import REPO

WORKFLOWS = sorted((REPO / ".github/workflows").glob("*.yml"))
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]


def _release_notes() -> ModuleType:
    spec = importlib.util.spec_from_file_location("release_notes", REPO / "scripts/release-notes.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_license_notice_and_security_policy_exist() -> None:
    license_text = (REPO / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert "Apache License, Version 2.0" in (REPO / "NOTICE").read_text()
    security = (REPO / "SECURITY.md").read_text()
    assert "## Reporting a vulnerability" in security and "## Scope" in security
    assert all(word in security for word in ("image", "entrypoint", "manifests"))


def test_the_build_floor_reads_a_license_expression() -> None:
    """setuptools < 77 rejects ``license = "Apache-2.0"`` (PEP 639): the floor must be 77 or newer."""
    (requirement,) = PYPROJECT["build-system"]["requires"]
    floor = re.fullmatch(r"setuptools>=(\d+)(?:\.\d+)*", requirement)
    assert floor and int(floor.group(1)) >= 77


def test_the_changelog_has_unreleased_and_the_current_version() -> None:
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert "keepachangelog.com" in changelog
    notes = _release_notes()
    assert notes.section(changelog, "Unreleased")
    assert notes.notes(f"v{VERSION}", REPO).strip() == notes.section(changelog, VERSION)


def test_release_notes_refuse_a_tag_that_is_not_the_version(tmp_path: Path) -> None:
    notes = _release_notes()
    with pytest.raises(ValueError, match=r"not pyproject\.toml's version"):
        notes.notes("v99.0.0", REPO)
    (tmp_path / "pyproject.toml").write_text('[project]\nversion = "1.2.3"\n')
    (tmp_path / "CHANGELOG.md").write_text("## [Unreleased]\n\n- x\n\n## [1.2.3]\n\n## [1.2.2]\n\n- y\n")
    with pytest.raises(ValueError, match="no section"):
        notes.notes("v1.2.3", tmp_path)


def test_the_release_workflow_publishes_the_changelog_section() -> None:
    jobs = yaml.safe_load((REPO / ".github/workflows/release.yml").read_text())["jobs"]
    runs = " ".join(step.get("run", "") for step in jobs["notes"]["steps"])
    assert "scripts/release-notes.py" in runs and "gh release create" in runs and "--notes-file" in runs


def test_the_version_is_written_only_in_pyproject() -> None:
    """No other file states the version: the package reads its metadata, the scripts read pyproject.toml."""
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True, check=True)
    skip = {"pyproject.toml", "CHANGELOG.md"}
    literal = re.compile(rf"""(version\w*\s*[:=]\s*|VERSION=)["']?{re.escape(VERSION)}\b""", re.IGNORECASE)
    found = []
    for name in tracked.stdout.splitlines():
        path = REPO / name
        if name in skip or name.startswith("tests/fixtures/") or not path.is_file() or path.is_symlink():
            continue
        if path.suffix in {".py", ".sh", ".toml", ".yml", ".yaml", ""} and literal.search(
            path.read_text(errors="replace")
        ):
            found.append(name)
    assert found == []


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_actions_are_pinned_by_commit_and_checkouts_keep_no_credentials(workflow: Path) -> None:
    text = workflow.read_text()
    uses = re.findall(r"^\s*-?\s*uses:\s*(\S+)(.*)$", text, re.MULTILINE)
    assert uses
    for ref, rest in uses:
        assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", ref), ref
        assert re.fullmatch(r"\s+# v\d+(\.\d+)*", rest), f"{ref}: the version in a comment"
    for job in yaml.safe_load(text)["jobs"].values():
        for step in job["steps"]:
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step.get("with", {}).get("persist-credentials") is False


def test_ci_runs_on_pushes_to_main_too() -> None:
    triggers = yaml.safe_load((REPO / ".github/workflows/pull-request.yml").read_text())[True]  # YAML 1.1 "on"
    assert "pull_request" in triggers
    assert triggers["push"] is None or not {"branches-ignore", "branches"} & set(triggers["push"])


def test_dependabot_covers_actions_docker_and_pip() -> None:
    updates = yaml.safe_load((REPO / ".github/dependabot.yml").read_text())["updates"]
    assert {u["package-ecosystem"] for u in updates} == {"github-actions", "docker", "pip"}


def test_the_documented_cosign_verify_accepts_every_publishing_workflow() -> None:
    publishing = sorted(p.name for p in WORKFLOWS if "cosign-installer" in p.read_text())
    assert publishing == ["follow-talos.yml", "release.yml"]
    (regexp,) = re.findall(r"--certificate-identity-regexp '([^']+)'", (REPO / "docs/image.md").read_text())
    for name in publishing:
        identity = f"https://github.com/<account>/talos-nvidia-driver/.github/workflows/{name}@refs/heads/main"
        assert re.fullmatch(regexp, identity), name
    assert not re.fullmatch(regexp, "https://github.com/<account>/x/.github/workflows/pull-request.yml@refs/heads/main")


def test_make_check_runs_the_repository_linters() -> None:
    dry = subprocess.run(["make", "-n", "-C", str(REPO), "check"], capture_output=True, text=True, check=True)
    assert "scripts/lint-repo.sh" in dry.stdout
    script = (REPO / "scripts/lint-repo.sh").read_text()
    assert all(f'"$BIN/{tool}"' in script for tool in ("shellcheck", "hadolint", "zizmor"))
    assert "bash scripts/lint-repo.sh" in (REPO / "scripts/test.sh").read_text()  # .ci/run


def test_shellcheck_sees_every_shell_script() -> None:
    listed = subprocess.run(
        ["bash", str(REPO / "scripts/lint-repo.sh"), "--list-shell"], capture_output=True, text=True, check=True
    ).stdout.split()
    expected = {".ci/run", "tests/gpu/check.sh", "scripts/setup.sh", "scripts/binfmt.sh", "scripts/lint-repo.sh"}
    assert expected <= set(listed)
    assert {p.relative_to(REPO).as_posix() for p in (REPO / "scripts").glob("*.sh")} <= set(listed)
