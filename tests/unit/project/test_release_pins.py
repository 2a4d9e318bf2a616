"""NVIDIA's driver archive per Talos release and tier in the release data (release/talos-drivers.toml):
its URL and both hashes per arch, read by the plan from siderolabs/extensions nvidia-gpu/vars.yaml
(NVIDIA_PKGS_<TIER>_<ARCH>_SHA256/_SHA512), one archive per driver, and the build arguments the Dockerfile
takes them from (scripts/release-matrix.py ``pins``). Fixture vars.yaml texts: tests/fixtures/release/vars."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.release import release_matrix
from helpers.support import REPO

rm = release_matrix()
FIXTURES = REPO / "tests" / "fixtures" / "release"
PROJECT = rm.project_version()
NEW_COMMIT = "1" * 40
# v1.13.9's vars.yaml at siderolabs/extensions 26822f5c95ab... (its tag): 595.91.07 on amd64.
SHA256_595_91_07_AMD64 = "93e0487897e843be767a3d259dffea8ac32dffff846e83df8d3abbf30be754ae"
URL_595_91_07_ARM64 = (
    "https://developer.download.nvidia.com/compute/nvidia-driver/redist/nvidia_driver/linux-sbsa/"
    "nvidia_driver-linux-sbsa-595.91.07-archive.tar.xz"
)


def _vars(release: str) -> str:
    return (FIXTURES / "vars" / f"{release}.yaml").read_text()


def _with_tag(release: str) -> str:
    """The real tag list of siderolabs/extensions plus an annotated tag ``release`` on NEW_COMMIT."""
    listed = (FIXTURES / "extensions-ls-remote.txt").read_text()
    return listed + f"{'2' * 40}\trefs/tags/{release}\n{NEW_COMMIT}\trefs/tags/{release}^{{}}\n"


def _everything_published(rows: list[object]) -> set[str]:
    return {t.removeprefix(":") for d in rm.drivers(rows) for t in rm.tags(rows, d, "", PROJECT)}


def test_every_row_pins_both_archives_of_both_tiers_and_each_driver_has_one_archive() -> None:
    releases = rm.load()
    for r in releases:
        assert sorted(r.pins) == ["lts", "production"] and all(sorted(a) == ["amd64", "arm64"] for a in r.pins.values())
    pins = rm.driver_pins(releases)
    assert {d for d, _ in pins} == set(rm.drivers(releases)) and len(pins) == 2 * len(rm.drivers(releases))
    assert pins[("595.91.07", "amd64")].sha256 == SHA256_595_91_07_AMD64
    assert pins[("595.91.07", "arm64")].url == URL_595_91_07_ARM64
    assert all(re.fullmatch(r"[0-9a-f]{128}", p.sha512) for p in pins.values())


def test_load_refuses_a_row_without_pins_and_a_driver_pinned_two_ways(tmp_path: Path) -> None:
    text = rm.DATA.read_text()
    unpinned = tmp_path / "unpinned.toml"
    unpinned.write_text(re.sub(r"\[talos\.pins\.lts\.arm64\]\n(.*\n){3}", "", text, count=1))
    with pytest.raises(ValueError, match=r"v1\.12\.0: no archive pin for lts arm64"):
        rm.load(unpinned)
    # v1.12.1 ships v1.12.0's drivers: one hash changed in the second row only.
    first = rm.driver_pins(rm.load())[("570.195.03", "amd64")].sha256
    head, _, tail = text.partition('release = "v1.12.1"')
    two_ways = tmp_path / "two-ways.toml"
    two_ways.write_text(head + 'release = "v1.12.1"' + tail.replace(first, "0" * 64, 1))
    with pytest.raises(ValueError, match=r"570\.195\.03 amd64: pinned differently in v1\.12\.0 and v1\.12\.1"):
        rm.load(two_ways)
    wrong_url = tmp_path / "wrong-url.toml"
    wrong_url.write_text(text.replace("linux-x86_64-570.195.03-archive", "linux-x86_64-570.195.04-archive", 1))
    with pytest.raises(ValueError, match=r"is not the archive of 570\.195\.03"):
        rm.load(wrong_url)


def test_the_plan_writes_the_pins_of_a_new_release_from_its_vars(tmp_path: Path) -> None:
    current = rm.load()
    remote = rm.remote_releases(_with_tag("v1.14.0"))
    done = rm.plan(current, remote, {"v1.14.0": _vars("v1.14.0")}, _everything_published(current), PROJECT)
    (row,) = [r for r in done.rows if r.release == "v1.14.0"]
    production = re.search(r"^NVIDIA_PKGS_PRODUCTION_AMD64_SHA512: (\S+)", _vars("v1.14.0"), re.M)
    assert production and row.pins["production"]["amd64"].sha512 == production.group(1)
    assert row.pins["production"]["arm64"].url.endswith("/linux-sbsa/nvidia_driver-linux-sbsa-595.99.02-archive.tar.xz")
    assert row.pins["lts"] == next(r for r in current if r.release == "v1.13.9").pins["lts"]  # the same driver
    data = tmp_path / "talos-drivers.toml"
    data.write_text(rm.render(done.rows, rm.header_of(rm.DATA)))
    assert rm.load(data) == done.rows  # written and read back whole
    patch = rm.plan(current, rm.remote_releases(_with_tag("v1.13.10")), {"v1.13.10": _vars("v1.13.10")}, set(), PROJECT)
    assert next(r for r in patch.rows if r.release == "v1.13.10").extensions_commit == NEW_COMMIT


def test_the_plan_refuses_vars_without_pins_or_pinning_a_listed_driver_differently() -> None:
    current = rm.load()
    remote = rm.remote_releases(_with_tag("v1.13.10"))
    # Extensions before v1.10 (v1.9.0) had no NVIDIA_PKGS_* variables: their hashes were inline in pkg.yaml.
    old_style = "NVIDIA_DRIVER_LTS_VERSION: 580.178.04\nNVIDIA_DRIVER_PRODUCTION_VERSION: 595.91.07\n"
    with pytest.raises(ValueError, match=r"v1\.13\.10: vars.yaml: NVIDIA_PKGS_PRODUCTION_AMD64_SHA256 is None"):
        rm.plan(current, remote, {"v1.13.10": old_style}, set(), PROJECT)
    short = _vars("v1.13.10").replace(SHA256_595_91_07_AMD64, SHA256_595_91_07_AMD64[:-1])
    with pytest.raises(ValueError, match=r"NVIDIA_PKGS_PRODUCTION_AMD64_SHA256 is .*, not a sha256"):
        rm.plan(current, remote, {"v1.13.10": short}, set(), PROJECT)
    moved = _vars("v1.13.10").replace(SHA256_595_91_07_AMD64, "f" * 64)
    with pytest.raises(ValueError, match=r"595\.91\.07 amd64: pinned differently in v1\.13\.9 and v1\.13\.10"):
        rm.plan(current, remote, {"v1.13.10": moved}, set(), PROJECT)


def test_the_pins_command_prints_the_dockerfile_build_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert rm.main(["pins", "595.91.07", "arm64"]) == 0
    url, sha256, sha512 = capsys.readouterr().out.splitlines()
    assert url == f"NVIDIA_ARCHIVE_URL={URL_595_91_07_ARM64}"
    assert re.fullmatch(r"NVIDIA_ARCHIVE_SHA256=[0-9a-f]{64}", sha256)
    assert re.fullmatch(r"NVIDIA_ARCHIVE_SHA512=[0-9a-f]{128}", sha512)
    assert rm.main(["pins", "595.91.07", "amd64"]) == 0
    assert f"NVIDIA_ARCHIVE_SHA256={SHA256_595_91_07_AMD64}" in capsys.readouterr().out.splitlines()
    for argv, message in (
        (["pins", "595.99.99", "amd64"], "no Talos release in the release data ships it"),
        (["pins", "595.91.07", "x86_64"], "arch 'x86_64': one of amd64, arm64"),
        (["driver", "v1.13.9", "beta"], "tier 'beta': one of production, lts"),
        (["driver", "v1.11.0", "lts"], "Talos v1.11.0 is not in the release data"),
    ):
        assert rm.main(argv) == 1
        captured = capsys.readouterr()
        assert captured.out == "" and message in captured.err
    assert rm.main(["driver", "v1.12.11", "production"]) == 0
    assert capsys.readouterr().out == "570.211.01\n"
