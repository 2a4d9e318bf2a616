"""Typed results of reading a kernel module file (no I/O, no heavy imports)."""

from __future__ import annotations

from driver_container.base.records import NamedRecord


class ModuleParameter(NamedRecord):
    """One ``parm``/``parmtype`` pair merged by name, as kmod's modinfo merges them."""

    name: str
    description: str | None
    type: str | None


class Signature(NamedRecord):
    """The appended module signature (kernel ``struct module_signature`` plus its payload).

    ``algo``, ``hash`` and ``id_type`` are the raw trailer bytes; for PKCS#7 (id_type 2) the other
    fields come from the first SignerInfo, as kmod reads them with OpenSSL. Text that is not UTF-8
    is kept with ``surrogateescape`` (as in ``ModuleInfo.fields``), so printing restores the bytes.
    """

    sig_id: str
    signer: str
    sig_key: bytes
    sig_hashalgo: str
    signature: bytes
    algo: int
    hash: int
    id_type: int


class ModuleInfo(NamedRecord):
    """Metadata of one module file. ``fields`` keeps every ``.modinfo`` entry in section order."""

    filename: str | None
    name: str
    fields: tuple[tuple[str, str], ...]
    signature: Signature | None = None
    compression: str | None = None
    machine: int | None = None  # ELF e_machine of the (decompressed) module: the node's architecture

    def get(self, key: str) -> str | None:
        """The first value of ``key`` (kernel semantics: the first entry wins for unique keys)."""
        for k, v in self.fields:
            if k == key:
                return v
        return None

    def get_all(self, key: str) -> list[str]:
        return [v for k, v in self.fields if k == key]

    @property
    def version(self) -> str | None:
        return self.get("version")

    @property
    def srcversion(self) -> str | None:
        return self.get("srcversion")

    @property
    def vermagic(self) -> str | None:
        return self.get("vermagic")

    @property
    def license(self) -> str | None:
        return self.get("license")

    @property
    def firmware(self) -> list[str]:
        return self.get_all("firmware")

    @property
    def parameters(self) -> dict[str, ModuleParameter]:
        """Parameters in kmod's order: reverse order of first appearance; later entries override."""
        return {p.name: p for p in merge_parameters(self.fields)}


def merge_parameters(fields: tuple[tuple[str, str], ...] | list[tuple[str, str]]) -> list[ModuleParameter]:
    """Merge ``parm=name:desc`` and ``parmtype=name:type`` like kmod's modinfo (tools/modinfo.c).

    kmod prepends each new name to a list, so the printed order is the reverse of first appearance;
    a repeated name overwrites its description or type. Entries without ':' are skipped.
    """
    order: list[str] = []
    desc: dict[str, str] = {}
    types: dict[str, str] = {}
    for key, value in fields:
        if key not in ("parm", "parmtype") or ":" not in value:
            continue
        name, _, rest = value.partition(":")
        if name not in desc and name not in types:
            order.append(name)
        (desc if key == "parm" else types)[name] = rest
    return [ModuleParameter(n, desc.get(n), types.get(n)) for n in reversed(order)]
