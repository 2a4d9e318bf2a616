"""What the dynamic loader needs from an ELF file, as data (``elfdeps`` reads it from the file).

Apart from the reader so that the manifest (``status``, every ``init``) and the image's index can hold
these facts without importing the reader's structures (bench/startup.py).
"""

from __future__ import annotations

from driver_container.base.records import NamedRecord


class ElfDeps(NamedRecord):
    """PT_INTERP, DT_SONAME, DT_NEEDED and DT_RUNPATH of one ELF object, with its machine, class and type."""

    machine: str  # pyelftools e_machine name, e.g. "EM_X86_64", "EM_AARCH64"
    elf_class: int  # 32 or 64
    elf_type: str  # "ET_DYN" or "ET_EXEC"
    interpreter: str | None  # PT_INTERP, e.g. "/lib64/ld-linux-x86-64.so.2"; None for static binaries
    soname: str | None
    needed: tuple[str, ...]
    runpath: tuple[str, ...] = ()

    @property
    def is_static(self) -> bool:
        return self.interpreter is None
