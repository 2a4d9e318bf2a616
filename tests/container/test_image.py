"""The image as users and gpu-operator run it: `docker run`, the startup probe's tools, a static ldconfig and
the static busybox published as the root's bin/sh."""

from __future__ import annotations

import io
import tarfile
from typing import Any

import pytest
from container_support import IMAGE_DRIVER_VERSION, run_to_end

# Containers start in seconds, but a cold engine or image pull can take minutes: 10 minutes per test.
pytestmark = [pytest.mark.container, pytest.mark.timeout(600)]


def test_help_lists_the_operator_commands(image: Any) -> None:
    done = run_to_end(image, ["--help"])
    assert done.exit_code == 0, done.stderr
    for command in ("init", "status", "load", "unload"):
        assert command in done.stdout


def test_status_reports_the_image_userspace_without_traceback(image: Any) -> None:
    # No NVIDIA module on the test machine: status reports errors (exit 1) but must name the userspace
    # baked into the image and never crash.
    done = run_to_end(image, ["status"])
    assert done.exit_code == 1, (done.stdout, done.stderr)
    assert f"userspace: {IMAGE_DRIVER_VERSION}" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_startup_probe_tools_are_on_path(image: Any) -> None:
    # gpu-operator's startup probe script runs these by name (NVIDIA/gpu-operator
    # assets/state-driver/0400_configmap.yaml @ 10ee5b36).
    tools = ["sh", "cat", "mkdir", "mv", "rm", "nvidia-smi"]
    # dash's `command -v` reports only its first operand: one call per tool.
    script = "; ".join(f"command -v {tool} || exit 1" for tool in tools)
    done = run_to_end(image, ["-c", script], entrypoint=["sh"])
    assert done.exit_code == 0, done.stderr
    assert [line.rsplit("/", 1)[-1] for line in done.stdout.split()] == tools


def test_nvidia_smi_loads_and_reports_no_driver(image: Any) -> None:
    # Exit 9 = the libraries loaded and no kernel driver answered; a loader error would be 127.
    done = run_to_end(image, [], entrypoint=["nvidia-smi"])
    assert done.exit_code == 9, done.stdout + done.stderr
    assert "couldn't communicate with the NVIDIA driver" in done.stdout


def test_no_compiler_or_build_tool_in_the_image(image: Any) -> None:
    script = "for t in gcc cc c++ make ld as dkms; do command -v $t && exit 1; done; exit 0"
    done = run_to_end(image, ["-c", script], entrypoint=["sh"])
    assert done.exit_code == 0, f"found: {done.stdout}"


def test_image_config_matches_the_operator_contract(image: Any) -> None:
    config = image.attrs["Config"]
    assert config["Entrypoint"] == ["nvidia-driver"]
    assert config["Cmd"] == ["init"]
    assert "NVIDIA_VISIBLE_DEVICES=void" in config["Env"]
    labels = config["Labels"]
    assert labels["io.nvidia.driver.version"] == IMAGE_DRIVER_VERSION
    assert labels["org.opencontainers.image.version"]


def _file_from_image(docker_client: Any, image: Any, path: str) -> bytes:
    container = docker_client.containers.create(image.id, entrypoint=["true"])
    try:
        stream, _ = container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
            member = next(m for m in archive.getmembers() if m.isfile())
            extracted = archive.extractfile(member)
            assert extracted is not None
            return extracted.read()
    finally:
        container.remove(force=True)


@pytest.mark.parametrize(
    "path",
    [
        "/sbin/ldconfig",  # `ldconfig -r DRIVER_ROOT` must run without a loader or libc inside the published root
        "/usr/bin/busybox",  # bin/sh of the root, which NVIDIA's DRA driver's MPS daemon chroots through
    ],
)
def test_the_roots_own_programs_are_static(docker_client: Any, image: Any, path: str) -> None:
    from elftools.elf.elffile import ELFFile

    data = _file_from_image(docker_client, image, path)
    elf = ELFFile(io.BytesIO(data))
    interpreters = [seg for seg in elf.iter_segments() if seg["p_type"] == "PT_INTERP"]
    assert interpreters == []
    dynamic = elf.get_section_by_name(".dynamic")
    needed = [] if dynamic is None else [t.needed for t in dynamic.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
    assert needed == []
