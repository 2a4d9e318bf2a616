"""platform.py: os-release parsing and Talos evidence, on fixture trees and hostile copies of them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from helpers.support import FIXTURES, fixture_paths
from hypothesis import given
from hypothesis import strategies as st

from driver_container.base.problems import Problem
from driver_container.findings import version_fix
from driver_container.inspect.platform import detect_platform, parse_os_release

HOSTS = FIXTURES / "hosts"


@pytest.fixture
def talos_copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(HOSTS / "talos-1.13-open-595", tree, symlinks=True)
    return tree


def test_parse_os_release_quotes_comments_and_garbage() -> None:
    text = '# c\nNAME="Talos"\nID=talos\nVERSION_ID=v1.13.6\nX=\'single q\'\nBAD LINE\n=novalue\nE="a\\"b"\n\x00\n'
    assert parse_os_release(text) == {
        "NAME": "Talos",
        "ID": "talos",
        "VERSION_ID": "v1.13.6",
        "X": "single q",
        "E": 'a"b',
    }


@given(st.text(max_size=400))
def test_parse_os_release_never_raises(text: str) -> None:
    for key in parse_os_release(text):
        assert key and "=" not in key


@pytest.mark.parametrize(
    ("tree", "name", "version", "evidence"),
    [
        ("talos-1.13-open-595", "talos", "v1.13.9", "os-release ID=talos"),
        ("talos-1.9-open-550", "talos", "v1.9.0", "os-release ID=talos"),
        ("ubuntu-24.04-dkms", "generic", None, "os-release ID=ubuntu, no Talos kernel evidence"),
    ],
)
def test_fixture_platforms(tree: str, name: str, version: str | None, evidence: str) -> None:
    info = detect_platform(fixture_paths(HOSTS / tree))
    assert (info.name, info.talos_version, info.evidence, info.problems) == (name, version, evidence, ())


def test_ubuntu_os_release_relative_link_resolves_in_host_root() -> None:
    info = detect_platform(fixture_paths(HOSTS / "ubuntu-24.04-dkms"))
    assert info.pretty_name == "Ubuntu 24.04.3 LTS" and info.kernel_release == "6.8.0-87-generic"


def test_override_wins() -> None:
    info = detect_platform(fixture_paths(HOSTS / "ubuntu-24.04-dkms"), "talos")
    assert (info.name, info.evidence, info.talos_version) == ("talos", "DRIVER_PLATFORM=talos", None)
    assert detect_platform(fixture_paths(HOSTS / "talos-1.13-open-595"), "generic").name == "generic"


def test_kernel_evidence_order_without_os_release(talos_copy: Path) -> None:
    (talos_copy / "host/etc/os-release").unlink()
    paths = fixture_paths(talos_copy)
    assert detect_platform(paths).evidence == "kernel release 6.18.44-talos ends with -talos"
    (talos_copy / "proc/sys/kernel/osrelease").write_text("6.18.24\n")
    assert detect_platform(paths).evidence == "/proc/version names a -talos kernel"
    (talos_copy / "proc/version").write_text("Linux version 6.18.24 (gcc) #1\n")
    info = detect_platform(paths)
    assert (info.name, info.evidence, info.talos_version) == ("talos", "talos.platform= in /proc/cmdline", None)
    (talos_copy / "proc/cmdline").write_text("root=/dev/sda ro\n")
    assert (detect_platform(paths).name, detect_platform(paths).evidence) == ("generic", "no Talos evidence")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "no ID= line"),
        (b"\x7fELF\x02\x01\x01\x00\xff\xfe\x00\x00garbage", "no ID= line"),
        (b"x" * ((1 << 20) + 1), "larger than 1048576 bytes"),
    ],
)
def test_bad_os_release_falls_back_to_kernel_evidence(talos_copy: Path, content: bytes, problem: str) -> None:
    (talos_copy / "host/etc/os-release").write_bytes(content)
    info = detect_platform(fixture_paths(talos_copy))
    assert info.name == "talos" and info.evidence.startswith("kernel release")
    assert any(problem in p.message for p in info.problems), info.problems
    assert {p.path for p in info.problems} == {str(talos_copy / "host/etc/os-release")}


def test_os_release_directory_symlink_loop_and_escape(talos_copy: Path, tmp_path: Path) -> None:
    os_release = talos_copy / "host/etc/os-release"
    os_release.unlink()
    os_release.mkdir()  # unreadable as a file
    where = str(os_release)
    assert Problem(where, "not a regular file") in detect_platform(fixture_paths(talos_copy)).problems
    os_release.rmdir()
    os.symlink("os-release", os_release)  # a link to itself: ELOOP
    assert Problem(where, "too many levels of symbolic links") in detect_platform(fixture_paths(talos_copy)).problems
    os_release.unlink()
    outside = tmp_path / "outside-os-release"
    outside.write_text("ID=ubuntu\n")
    os.symlink(str(outside), os_release)  # absolute: must restart at the host root, not leave it
    info = detect_platform(fixture_paths(talos_copy))
    assert info.os_id is None and info.name == "talos"


@pytest.mark.parametrize(
    ("os_release", "tag"),
    [
        ("ID=talos\nVERSION_ID=v1.13.9\n", "talosv1.13.9"),
        ('ID=ubuntu\nVERSION_ID="24.04"\n', "ubuntu24.04"),
        ("ID=rhel\nVERSION_ID=9.4\n", "rhel9"),  # gpu-operator's getOSTag: major only for ol, rocky, rhel
        ("ID=rocky\nVERSION_ID=8.10\n", "rocky8"),
        ("ID=ol\nVERSION_ID=9.5\n", "ol9"),
        ("ID=talos\n", None),  # no VERSION_ID: NFD sets no label, the operator renders no pod
        ('ID=talos\nVERSION_ID="v1.13 beta"\n', None),  # not a label value
        (f"ID=talos\nVERSION_ID=v{'1' * 63}\n", None),  # 64 characters: longer than a label value
    ],
)
def test_operator_os_tag_is_what_gpu_operator_appends(talos_copy: Path, os_release: str, tag: str | None) -> None:
    (talos_copy / "host/etc/os-release").write_text(os_release)
    assert detect_platform(fixture_paths(talos_copy)).operator_os_tag == tag


def test_version_fix_names_the_tag_the_pod_pulls_wherever_os_release_gives_it(talos_copy: Path) -> None:
    talos = version_fix("580.178.04", "595.91.07", detect_platform(fixture_paths(talos_copy)))
    assert "the driver pod then pulls 580.178.04-talosv1.13.9)" in talos
    # Without the pod context the setting in force is unknown (it may be `production` already): no channel.
    assert "production" not in talos and "lts" not in talos
    ubuntu = version_fix("570.195.03", "595.91.07", detect_platform(fixture_paths(HOSTS / "ubuntu-24.04-dkms")))
    assert "the driver pod then pulls 570.195.03-ubuntu24.04)" in ubuntu and "<os tag>" not in ubuntu
    assert "production or lts" not in ubuntu  # channel tags exist for Talos releases only
    forced_talos = detect_platform(fixture_paths(HOSTS / "ubuntu-24.04-dkms"), "talos")
    forced = version_fix("570.195.03", "595.91.07", forced_talos)
    assert "pulls 570.195.03-ubuntu24.04)" in forced and "production or lts" not in forced  # the labels decide
    (talos_copy / "host/etc/os-release").unlink()  # Talos by its kernel alone: the tag is not known
    unknown = version_fix("580.178.04", "595.91.07", detect_platform(fixture_paths(talos_copy)))
    assert "the driver pod then pulls 580.178.04-<os tag>)" in unknown
