#!/usr/bin/env python3
"""Make a driver archive in NVIDIA's layout from Debian's real files, for the Dockerfile's archive route in CI.

NVIDIA's download server is out of reach in CI, so the route that release builds take (USERSPACE_SOURCE=archive:
download ``nvidia_driver-linux-<arch>-<version>-archive.tar.xz``, check its sha256 and sha512, lay it out by its
manifest) is fed with this archive instead, served over loopback HTTP by the test that builds it. Its layout is
the one siderolabs/extensions unpacks (nvidia-gpu/nvidia-container-toolkit/nvidia-pkgs/production/pkg.yaml @
26822f5c95ab): one top directory ``nvidia_driver-linux-<arch>-<version>-archive/`` with ``bin/``, ``lib/``,
``etc/``, ``firmware/``, ``supported-gpus/supported-gpus.json``, ``LICENSE`` and ``MANIFEST`` (the ``.run``'s
``.manifest``: description, version, arch, then ``<path> <mode> <TYPE> [NATIVE] [<subdir>/] [<target>]`` per
file). The files are those of the ``.run``-shaped tree scripts/make-nvidia-run-tree.sh assembles from Debian's
535 packages; the entry types are the ones NVIDIA's manifests give those files. Entries a driver container
leaves out (the installer, documentation, 32-bit compat) are listed too, so the layout must skip them.

The LICENSE is a stand-in that says where the files' licence is (Debian's copyright files of the packages);
supported-gpus.json is written in NVIDIA's schema from the project's test fixture (not NVIDIA's list).

Usage: make-nvidia-archive.py TREE VERSION ARCH OUT_DIR
  TREE     a tree made by scripts/make-nvidia-run-tree.sh (e.g. .cache/nvidia-tree)
  ARCH     x86_64 or sbsa (NVIDIA's names)
  OUT_DIR  gets the archive and <archive>.sha256 / <archive>.sha512 (one hex digest each)
Deterministic: the same tree gives the same bytes (sorted members, fixed mtime and owner), so the pins hold.
"""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SUPPORTED_GPUS_FIXTURE = REPO / "tests/fixtures/supported-gpus/supported-gpus-595.json"
MTIME = 1_700_000_000
# The library types NVIDIA's manifests give these libraries (everything else of the 535 set: OPENGL_LIB).
LIB_TYPES = {
    "libcuda": "CUDA_LIB",
    "libnvidia-ptxjitcompiler": "CUDA_LIB",
    "libnvidia-nvvm": "CUDA_LIB",
    "libnvidia-ml": "UTILITY_LIB",
    "libnvidia-cfg": "UTILITY_LIB",
    "libnvidia-opencl": "OPENCL_LIB",
    "libnvcuvid": "NVCUVID_LIB",
    "libnvidia-encode": "ENCODEAPI_LIB",
    "libGLX_nvidia": "GLX_CLIENT_LIB",
    "libEGL_nvidia": "EGL_CLIENT_LIB",
    "libvdpau_nvidia": "VDPAU_LIB",
}
CONFIG_TYPES = {
    "nvidia_icd.json": "VULKAN_ICD_JSON",
    "nvidia_layers.json": "VULKAN_ICD_JSON",
    "10_nvidia.json": "GLVND_EGL_ICD_JSON",
    "15_nvidia_gbm.json": "EGL_EXTERNAL_PLATFORM_JSON",
    "10_nvidia_wayland.json": "EGL_EXTERNAL_PLATFORM_JSON",
    "nvidia.icd": "CUDA_ICD",
}
LICENSE = """\
Stand-in for NVIDIA's LICENSE in a test archive: the files of this archive are NVIDIA's driver userspace as
Debian packages it (non-free), under NVIDIA's licence as Debian's copyright files of those packages give it
(/usr/share/doc/<package>/copyright). A real driver archive carries NVIDIA's own LICENSE here.
"""


def _entries(tree: Path, version: str) -> tuple[list[str], dict[str, Path]]:
    """Manifest lines and archive members (archive path -> file in the tree)."""
    lines: list[str] = []
    members: dict[str, Path] = {}
    for f in sorted(p for p in tree.iterdir() if p.is_file() and not p.is_symlink() and p.name != ".manifest"):
        name = f.name
        if name.startswith("lib"):
            stem = name.split(".so")[0]
            kind = LIB_TYPES.get(stem, "OPENGL_LIB")
            lines.append(f"{name} 0755 {kind} NATIVE" + (" vdpau/" if kind == "VDPAU_LIB" else ""))
            members[f"lib/{name}"] = f
            if stem in ("libcuda", "libnvidia-ml") and name.endswith(version):
                link = "CUDA_SYMLINK" if stem == "libcuda" else "UTILITY_LIB_SYMLINK"
                lines.append(f"{stem}.so.1 0000 {link} NATIVE {name}")
                lines.append(f"{stem}.so 0000 {link} NATIVE {stem}.so.1")
                lines.append(f"32/{name} 0755 {kind} COMPAT32")  # left out: 32-bit compat
        elif name in CONFIG_TYPES:
            lines.append(f"{name} 0644 {CONFIG_TYPES[name]}")
            members[f"etc/{name}"] = f
        else:
            kind = "NVIDIA_MODPROBE" if name == "nvidia-modprobe" else "UTILITY_BINARY"
            lines.append(f"{name} {'4755' if kind == 'NVIDIA_MODPROBE' else '0755'} {kind}")
            members[f"bin/{name}"] = f
    for f in sorted((tree / "firmware").glob("*.bin")):
        lines.append(f"firmware/{f.name} 0444 FIRMWARE MODULE:resman")
        members[f"firmware/{f.name}"] = f
    lines += [
        "nvidia-installer 0755 INSTALLER_BINARY",
        "README.txt 0644 DOCUMENTATION",
        "supported-gpus/supported-gpus.json 0644 DOCUMENTATION supported-gpus/",
        "kernel/nvidia.c 0644 KERNEL_MODULE_SRC INHERIT_PATH_DEPTH:1 MODULE:resman",
    ]
    return lines, members


def make(tree: Path, version: str, arch: str, out_dir: Path) -> Path:
    if not (tree / f"libcuda.so.{version}").is_file():
        raise SystemExit(f"make-nvidia-archive: {tree} has no libcuda.so.{version}")
    top = f"nvidia_driver-linux-{arch}-{version}-archive"
    lines, members = _entries(tree, version)
    machine = "aarch64" if arch == "sbsa" else "x86_64"
    header = [f"NVIDIA Accelerated Graphics Driver for Linux-{machine} {version} (test archive from Debian)", version]
    texts = {
        "MANIFEST": "\n".join([*header, machine, *lines]) + "\n",
        "LICENSE": LICENSE,
        "supported-gpus/supported-gpus.json": json.dumps(json.loads(SUPPORTED_GPUS_FIXTURE.read_text()), indent=1),
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for rel in sorted([*members, *texts]):
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = MTIME, 0, 0, "root", "root"
            data = members[rel].read_bytes() if rel in members else texts[rel].encode()
            info.size, info.mode = len(data), 0o755 if rel.startswith(("bin/", "lib/")) else 0o644
            tar.addfile(info, io.BytesIO(data))
    out_dir.mkdir(parents=True, exist_ok=True)
    archive = out_dir / f"{top}.tar.xz"
    payload = lzma.compress(buffer.getvalue(), preset=1)
    archive.write_bytes(payload)
    for algorithm in ("sha256", "sha512"):
        (out_dir / f"{archive.name}.{algorithm}").write_text(hashlib.new(algorithm, payload).hexdigest() + "\n")
    return archive


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[2] not in ("x86_64", "sbsa"):
        print(__doc__, file=sys.stderr)
        return 2
    archive = make(Path(argv[0]), argv[1], argv[2], Path(argv[3]))
    print(f"make-nvidia-archive: {archive} ({archive.stat().st_size} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
