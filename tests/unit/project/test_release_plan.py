"""Images that follow Talos: the planning step of the daily workflow (scripts/release-matrix.py ``plan``)
turns siderolabs/extensions' tag list, each new tag's nvidia-gpu/vars.yaml and the registry's tags into
the updated release/talos-drivers.toml, the drivers to build and the tags to add by digest (docs/image.md,
"Following Talos"). Fixture data: tests/fixtures/release (the real `git ls-remote --tags` of
siderolabs/extensions for v1.11-v1.14, and vars.yaml files of two releases that do not exist yet)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from helpers.release import release_matrix
from helpers.support import REPO

FIXTURES = REPO / "tests" / "fixtures" / "release"
LS_REMOTE = (FIXTURES / "extensions-ls-remote.txt").read_text()
NEW_COMMIT = "1" * 40


rm = release_matrix()
PROJECT = rm.project_version()  # pyproject.toml's; the immutable tags carry it


def _vars(release: str) -> dict[str, str]:
    return {release: (FIXTURES / "vars" / f"{release}.yaml").read_text()}


def _everything_published(rows: list[object]) -> set[str]:
    return {t.removeprefix(":") for d in rm.drivers(rows) for t in rm.tags(rows, d, "", PROJECT)}


def _with_tag(release: str, commit: str = NEW_COMMIT) -> str:
    return LS_REMOTE + f"{'2' * 40}\trefs/tags/{release}\n{commit}\trefs/tags/{release}^{{}}\n"


def test_the_live_tag_list_gives_the_data_file_and_an_empty_plan() -> None:
    current = rm.load()
    remote = rm.remote_releases(LS_REMOTE)
    assert {r.release: r.extensions_commit for r in current} == {r: remote[r] for r in rm.followed(list(remote))}
    done = rm.plan(current, remote, {}, _everything_published(current), PROJECT)
    assert done.report() == {"added": [], "dropped": [], "build": [], "tag": {}}
    assert rm.render(done.rows, rm.header_of(rm.DATA)) == rm.DATA.read_text()  # rewrites it byte for byte


def test_a_new_talos_release_with_an_old_driver_is_only_tagged_by_digest() -> None:
    current = rm.load()
    remote = rm.remote_releases(_with_tag("v1.13.10"))
    done = rm.plan(current, remote, _vars("v1.13.10"), _everything_published(current), PROJECT)
    assert done.added == ["v1.13.10"] and done.dropped == [] and done.build == []
    assert done.tag == {
        f"580.178.04-{PROJECT}": [
            "580.178.04-talosv1.13.10",
            f"580.178.04-{PROJECT}-talosv1.13.10",
            "lts-talosv1.13.10",
            f"lts-{PROJECT}-talosv1.13.10",
        ],
        f"595.91.07-{PROJECT}": [
            "595.91.07-talosv1.13.10",
            f"595.91.07-{PROJECT}-talosv1.13.10",
            "production-talosv1.13.10",
            f"production-{PROJECT}-talosv1.13.10",
        ],
    }
    (row,) = [r for r in done.rows if r.release == "v1.13.10"]
    v1_13_9 = next(r for r in current if r.release == "v1.13.9")
    # the peeled commit; the archive pins from its vars.yaml, v1.13.9's as its drivers are
    assert row == rm.TalosRelease("v1.13.10", NEW_COMMIT, "595.91.07", "580.178.04", v1_13_9.pins)
    assert [r.release for r in done.rows][-3:] == ["v1.13.9", "v1.13.10", "v1.14.0-rc.1"]


def test_a_new_driver_is_built_and_the_final_supersedes_its_rc() -> None:
    current = rm.load()
    remote = rm.remote_releases(_with_tag("v1.14.0"))
    done = rm.plan(current, remote, _vars("v1.14.0"), _everything_published(current), PROJECT)
    assert done.added == ["v1.14.0"] and done.dropped == ["v1.14.0-rc.1"]
    assert done.build == ["595.99.02"]  # its push carries all its tags, the manager's too
    assert done.tag == {
        f"580.178.04-{PROJECT}": [
            "580.178.04-talosv1.14.0",
            f"580.178.04-{PROJECT}-talosv1.14.0",
            "lts-talosv1.14.0",
            f"lts-{PROJECT}-talosv1.14.0",
        ]
    }
    assert rm.manager_driver(done.rows) == "595.99.02"
    assert ":production-talosv1.14.0" in rm.tags(done.rows, "595.99.02", "", PROJECT)


def test_only_the_newest_pre_release_of_a_minor_without_final_is_followed() -> None:
    names = ["v1.11.5", "v1.12.0-rc.0", "v1.12.0", "v1.15.0-alpha.2", "v1.15.0-beta.0", "v1.15.0-alpha.10"]
    assert rm.followed(names) == ["v1.12.0", "v1.15.0-beta.0"]
    assert rm.release_key("v1.15.0-rc.0") < rm.release_key("v1.15.0") < rm.release_key("v1.15.1-alpha.0")


def test_applying_a_plan_makes_the_next_one_empty() -> None:
    current = rm.load()
    remote = rm.remote_releases(_with_tag("v1.14.0"))
    published = _everything_published(current)
    first = rm.plan(current, remote, _vars("v1.14.0"), published, PROJECT)
    published |= {t for tags in first.tag.values() for t in tags}
    published |= {t.removeprefix(":") for d in first.build for t in rm.tags(first.rows, d, "", PROJECT)}
    second = rm.plan(first.rows, remote, {}, published, PROJECT)
    assert second.report() == {"added": [], "dropped": [], "build": [], "tag": {}}
    assert second.rows == first.rows


def test_a_new_project_version_builds_every_driver_once() -> None:
    current = rm.load()
    remote = rm.remote_releases(LS_REMOTE)
    done = rm.plan(current, remote, {}, _everything_published(current), "0.2.0")
    assert done.build == list(rm.drivers(current)) and done.tag == {}


def test_a_new_release_without_its_vars_is_an_error_not_a_guess() -> None:
    with pytest.raises(ValueError, match=r"v1\.13\.10: new Talos release, but no nvidia-gpu/vars.yaml"):
        rm.plan(rm.load(), rm.remote_releases(_with_tag("v1.13.10")), {}, set(), PROJECT)
    bad = {"v1.13.10": "NVIDIA_DRIVER_PRODUCTION_VERSION: latest\n"}
    with pytest.raises(ValueError, match="names no production and LTS driver"):
        rm.plan(rm.load(), rm.remote_releases(_with_tag("v1.13.10")), bad, set(), PROJECT)


def test_the_plan_command_writes_the_data_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "talos-drivers.toml"
    data.write_text(rm.DATA.read_text())
    (tmp_path / "tags").write_text(_with_tag("v1.13.10"))
    (tmp_path / "published").write_text("\n".join(sorted(_everything_published(rm.load()))) + "\n")
    args = [
        "plan",
        "--tags",
        str(tmp_path / "tags"),
        "--vars-dir",
        str(FIXTURES / "vars"),
        "--published",
        str(tmp_path / "published"),
    ]
    assert rm.main(args, data) == 0
    assert json.loads(capsys.readouterr().out)["added"] == ["v1.13.10"]
    assert data.read_text() == rm.DATA.read_text()  # without --write, nothing changes
    assert rm.main([*args, "--write"], data) == 0
    rows = rm.load(data)
    assert [dataclasses.astuple(r)[:4] for r in rows if r.release == "v1.13.10"] == [
        ("v1.13.10", NEW_COMMIT, "595.91.07", "580.178.04")
    ]
    capsys.readouterr()
    (tmp_path / "empty").mkdir()
    assert rm.main([*args[:3], "--vars-dir", str(tmp_path / "empty"), *args[5:]], rm.DATA) == 1
    assert "no nvidia-gpu/vars.yaml given" in capsys.readouterr().err


# --- every sample names a channel or a digest (docs/image.md, "Channel or digest") -------------------------

DRIVER_VERSION_OK = re.compile(r"^((production|lts)(-\d+\.\d+\.\d+)?|sha256:[0-9a-f]{64}|\$\{?[A-Z_][A-Z0-9_]*\}?)$")
MANAGER_VERSION_OK = re.compile(r"^(manager(-\d+\.\d+\.\d+)?|sha256:[0-9a-f]{64}|\$\{?[A-Z_][A-Z0-9_]*\}?)$")
KEY = re.compile(r"^(\s*)(?:- )?([A-Za-z_][\w.-]*):\s*(.*?)\s*(?:#.*)?$")
SET = re.compile(r"--set(?:-string)?[ =](driver(?:\.manager)?\.version)=(\S+)")


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)


def driver_versions(text: str) -> list[tuple[str, str]]:
    """(where, value) of every driver and manager version a YAML text or shell block sets: `version` under
    `driver:` / `driver.manager:` (helm values), under an NVIDIADriver's `spec:` / `spec.manager:`, and
    helm's `--set driver[.manager].version=`."""
    found = [(key, value.strip("'\"")) for key, value in SET.findall(text)]
    nvidiadriver = "kind: NVIDIADriver" in text
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        matched = KEY.match(line)
        if not matched or line.lstrip().startswith("#"):
            continue
        indent, key, value = len(matched.group(1)), matched.group(2), matched.group(3)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join(k for _, k in stack)
        owners = ("driver", "driver.manager") + (("spec", "spec.manager") if nvidiadriver else ())
        if key == "version" and path in owners and value:
            found.append((f"{path}.version", value.strip("'\"")))
        if not value:
            stack.append((indent, key))
    return found


def _samples() -> dict[str, str]:
    texts = {str(p.relative_to(REPO)): p.read_text() for p in sorted((REPO / "docs" / "deploy").glob("*.yaml"))}
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for n, block in enumerate(_code_blocks(page.read_text())):
            texts[f"{page.relative_to(REPO)} block {n}"] = block
    return texts


# NVIDIA's own driver image, whose tags are <driver>-<os> (the default NVIDIADriver of
# docs/deploy/nvidiadriver-mixed-os.yaml, for the cluster's other OS): not this project's image.
NVIDIA_IMAGE = re.compile(r"^\s*repository:\s*nvcr\.io/nvidia\s*$", re.M)


def test_every_sample_sets_a_channel_or_a_digest_never_a_bare_driver_tag() -> None:
    checked, wrong, nvidias = 0, [], []
    for where, text in _samples().items():
        for document in re.split(r"^---\s*$", text, flags=re.M):
            if NVIDIA_IMAGE.search(document):
                nvidias.append(where)
                continue
            for key, value in driver_versions(document):
                ok = MANAGER_VERSION_OK if key.endswith("manager.version") else DRIVER_VERSION_OK
                checked += 1
                if not ok.match(value):
                    wrong.append(f"{where}: {key}: {value}")
    assert wrong == []
    assert checked >= 4  # both deploy samples, driver and manager
    assert nvidias == ["docs/deploy/nvidiadriver-mixed-os.yaml"]


def test_the_sample_reader_sees_every_form() -> None:
    helm = 'driver:\n  enabled: true\n  version: "595.91.07"\n  manager:\n    image: x\n    version: 595.91.07\n'
    assert driver_versions(helm) == [("driver.version", "595.91.07"), ("driver.manager.version", "595.91.07")]
    cr = "kind: NVIDIADriver\nspec:\n  version: production\n  manager:\n    version: manager\n"
    assert driver_versions(cr) == [("spec.version", "production"), ("spec.manager.version", "manager")]
    heredoc = "cat >values.yaml <<EOF\ndriver:\n  version: $DRIVER_DIGEST\nEOF\nhelm install --set driver.version=1.2\n"
    assert driver_versions(heredoc) == [("driver.version", "1.2"), ("driver.version", "$DRIVER_DIGEST")]
    other = "toolkit:\n  version: v1.2\ngds:\n  version: 595.91.07\n"  # not a driver version
    assert driver_versions(other) == []
    assert not DRIVER_VERSION_OK.match("595.91.07") and DRIVER_VERSION_OK.match("sha256:" + "a" * 64)
    assert DRIVER_VERSION_OK.match("${DRIVER_DIGEST}") and not MANAGER_VERSION_OK.match("production")
    assert DRIVER_VERSION_OK.match("production-0.1.0") and MANAGER_VERSION_OK.match("manager-0.1.0")
    assert not DRIVER_VERSION_OK.match("595.91.07-0.1.0") and not DRIVER_VERSION_OK.match("production-talosv1.13.9")


# --- the daily workflow and its script ---------------------------------------------------------------------


def test_the_daily_workflow_runs_the_local_script_and_proposes_the_data_file() -> None:
    yaml = pytest.importorskip("yaml")
    flow = yaml.safe_load((REPO / ".github/workflows/follow-talos.yml").read_text())
    triggers = flow[True]  # YAML 1.1 reads the key `on` as true
    (cron,) = [entry["cron"] for entry in triggers["schedule"]]
    assert re.fullmatch(r"\d+ \d+ \* \* \*", cron) and "workflow_dispatch" in triggers  # daily, and by hand
    (job,) = flow["jobs"].values()
    runs = [s["run"] for s in job["steps"] if "run" in s and "release-" in s["run"]]
    assert runs == [f"bash scripts/release-follow.sh {phase}" for phase in ("plan", "build", "tag")]
    (pr,) = [s for s in job["steps"] if s.get("uses", "").startswith("peter-evans/create-pull-request@")]
    assert pr["with"]["add-paths"] == "release/talos-drivers.toml"
    uses = {s["uses"].split("@")[0] for s in job["steps"] if "uses" in s}
    assert {"imjasonh/setup-crane", "docker/setup-buildx-action", "sigstore/cosign-installer"} <= uses
    assert job["permissions"]["packages"] == "write" and flow["permissions"] == {"contents": "read"}


def _follow(tmp_path: Path, tags: str, published: set[str]) -> tuple[subprocess.CompletedProcess[str], Path]:
    (tmp_path / "tags").write_text(tags)
    (tmp_path / "published").write_text("".join(f"{t}\n" for t in sorted(published)))
    data = tmp_path / "talos-drivers.toml"
    if not data.exists():
        data.write_text(rm.DATA.read_text())
    env = {k: v for k, v in os.environ.items() if k != "PUSH"} | {
        "RELEASE_DATA": str(data),
        "FOLLOW_DIR": str(tmp_path / "follow"),
        "EXTENSIONS_TAGS": str(tmp_path / "tags"),
        "VARS_DIR": str(FIXTURES / "vars"),
        "PUBLISHED": str(tmp_path / "published"),
        "IMAGE_REPO": "ghcr.io/o/t",
    }
    done = subprocess.run(
        ["bash", str(REPO / "scripts/release-follow.sh"), "plan", "build", "tag"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done, tmp_path / "follow"


def test_the_follow_script_plans_and_tags_offline_and_a_second_run_does_nothing(tmp_path: Path) -> None:
    published = _everything_published(rm.load())
    done, follow = _follow(tmp_path, _with_tag("v1.13.10"), published)
    assert done.returncode == 0, done.stderr
    assert rm.load(tmp_path / "talos-drivers.toml")[-2].release == "v1.13.10"
    assert (follow / "build").read_text() == ""
    wanted = rm.plan(rm.load(), rm.remote_releases(_with_tag("v1.13.10")), _vars("v1.13.10"), published, PROJECT)
    would = re.findall(r"would add ghcr.io/o/t:(\S+) to the image of ghcr.io/o/t:(\S+)", done.stderr)
    assert sorted(would) == sorted((new, source) for source, tags in wanted.tag.items() for new in tags)
    again, follow = _follow(tmp_path, _with_tag("v1.13.10"), published | {n for n, _ in would})
    assert again.returncode == 0, again.stderr
    assert json.loads((follow / "plan.json").read_text()) == {"added": [], "dropped": [], "build": [], "tag": {}}
    assert "would add" not in again.stderr


def test_image_doc_states_the_tags_and_the_schedule_the_code_uses() -> None:
    text = (REPO / "docs" / "image.md").read_text()
    flow = (REPO / ".github/workflows/follow-talos.yml").read_text()
    minute, hour = re.search(r'cron: "(\d+) (\d+) \* \* \*"', flow).groups()  # type: ignore[union-attr]
    assert f"{int(hour):02d}:{int(minute):02d} UTC" in text
    for tag in (*(f"`{c}-talos<R>`" for c in rm.CHANNELS), f"`{rm.MANAGER}`", "`<driver>-<project version>`"):
        assert tag in text, tag
    releases = rm.load()
    for release, channel, driver in (
        ("v1.13.9", "production", "595.91.07"),
        ("v1.13.9", "lts", "580.178.04"),
        ("v1.12.11", "production", "570.211.01"),
    ):
        assert f"`{channel}-talos{release}` ({driver})" in text
        assert f"R:{channel}-talos{release}" in rm.tags(releases, driver, "R")
