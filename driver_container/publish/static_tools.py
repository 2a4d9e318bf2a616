"""The static programs the published root gets for itself from USERSPACE_ROOT: ldconfig and a shell.

Both run where nothing else of the root may be usable, so each must be a static ELF (no PT_INTERP),
checked, never a dynamic one.

- ldconfig (required): the toolkit runs it inside workload containers (NVIDIA/nvidia-container-toolkit
  v1.20.0 @ 5505e2f9 ``api/config/v1/cli.go``, ``cmd/nvidia-cdi-hook/update-ldcache``; docs/operator.md),
  and ``init`` runs it as ``ldconfig -r`` on a root without libc.
- a shell (optional), published as ``bin/sh``: NVIDIA's DRA driver runs its MPS control daemon as
  ``chroot <driver root> sh -c "nvidia-cuda-mps-control -d"`` when the root has an executable
  ``bin/sh`` or ``usr/bin/sh``; without one it runs the root's binaries from its own container with an
  LD_LIBRARY_PATH that misses usr/lib/<triplet>, where ``nvidia-cuda-mps-server`` cannot load
  libcuda.so.1 (kubernetes-sigs/dra-driver-nvidia-gpu templates/mps-control-daemon.tmpl.yaml @95932046;
  docs/mps.md). Debian's ``busybox-static`` installs a static busybox at /bin/busybox
  (merged /usr: usr/bin/busybox), which runs the applet its argv[0] names: a copy published as ``bin/sh``
  is a shell. A userspace without one still publishes; ``status`` then lists the shell under what the
  root lacks (``toolkit_features``).
"""

from __future__ import annotations

import logging
import stat
from dataclasses import replace
from pathlib import Path

from driver_container.base.errors import PublishError
from driver_container.base.resolver import Root
from driver_container.publish.model import SourceFile
from driver_container.publish.sources import ElfFacts, source_file
from driver_container.runtime.runner import Runner

log = logging.getLogger(__name__)

LDCONFIG_CANDIDATES = ("sbin/ldconfig.real", "sbin/ldconfig", "usr/sbin/ldconfig.real", "usr/sbin/ldconfig")
SHELL_CANDIDATES = ("usr/bin/busybox", "bin/busybox")


def find_ldconfig(root: Root, runner: Runner, elf: ElfFacts | None = None) -> SourceFile:
    """A static ldconfig from the image, else from PATH; an error when there is none."""
    elf = elf or ElfFacts()
    for inner in LDCONFIG_CANDIDATES:
        if root.is_file(inner):
            src = source_file(root, inner)
            facts = elf.get_if_elf(src.real, src.shown, src.size, src.mtime_ns)  # Debian's sbin/ldconfig is a script
            if facts is not None and facts.is_static:
                return replace(src, elf=facts)
            log.debug("%s is not a static ELF ldconfig", src.shown)
    on_path = Path(runner.which("ldconfig")).resolve()
    st = on_path.stat()
    facts = elf.get_if_elf(on_path, str(on_path), st.st_size, st.st_mtime_ns)
    if facts is not None and facts.is_static:
        return SourceFile(on_path, str(on_path), st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode), facts)
    raise PublishError(
        f"no static ldconfig: not in USERSPACE_ROOT ({', '.join(LDCONFIG_CANDIDATES)}) and {on_path} is dynamic",
        path=on_path,
        fix="install glibc's ldconfig (libc-bin) in the driver image",
    )


def find_static_shell(root: Root, machine: str, elf: ElfFacts) -> SourceFile | None:
    """The image's static busybox for ``machine`` (the NVIDIA libraries' ELF machine); None without one."""
    for inner in SHELL_CANDIDATES:
        if not root.is_file(inner):
            continue
        src = source_file(root, inner)
        facts = elf.get_if_elf(src.real, src.shown, src.size, src.mtime_ns)
        if facts is None or not facts.is_static or facts.machine != machine:
            log.warning(
                "%s is not a static %s ELF binary: the root gets no shell (MPS through NVIDIA's DRA driver needs one)",
                src.shown,
                machine,
            )
            continue
        return replace(src, elf=facts)
    log.info("no static shell in USERSPACE_ROOT (%s): the root gets no bin/sh", ", ".join(SHELL_CANDIDATES))
    return None
