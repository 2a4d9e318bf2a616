"""Where the GSP firmware the loaded module names is, and whether the kernel's own loader would find it."""

from __future__ import annotations

from pathlib import Path

from driver_container.base.errors import HostReadError
from driver_container.base.paths import HostPaths
from driver_container.base.problems import Problem, noted
from driver_container.base.records import NamedRecord
from driver_container.base.resolver import Root
from driver_container.formats.kernel.sysfs import FIRMWARE_PATH_PARAM
from driver_container.formats.userspace_layout import IMAGE_FIRMWARE_DIRS

# Firmware directories the kernel searches after its custom path (drivers/base/firmware_loader/main.c
# fw_path[]); the toolkit searches the same list under the driver root.
HOST_FIRMWARE_DIRS = ("/lib/firmware/updates/{kver}", "/lib/firmware/updates", "/lib/firmware/{kver}", "/lib/firmware")


def _firmware_roots(paths: HostPaths, kver: str | None, custom: str) -> list[tuple[Root, str, bool]]:
    """(root, dir, the kernel searches it) where the kernel (host, its ``custom`` path first), the toolkit
    (driver root) or the image to be published (userspace root) keep firmware; ``{kver}`` entries are
    dropped without a release."""
    dirs = [d.format(kver=kver) for d in HOST_FIRMWARE_DIRS if kver or "{kver}" not in d]
    driver = Root(paths.driver_root)
    places: list[tuple[Root, str, bool]] = []
    if custom:
        custom_path = Path(custom)
        if custom_path.is_relative_to(paths.host_driver_root):
            places.append((driver, "/" + str(custom_path.relative_to(paths.host_driver_root)), True))
        else:
            places.append((paths.host, custom, True))
    places += [(paths.host, d, True) for d in dirs] + [(driver, d, False) for d in dirs]
    places += [(paths.userspace, f"/{d}", False) for d in IMAGE_FIRMWARE_DIRS]
    return places


class FirmwareFound(NamedRecord):
    where: dict[str, str | None]  # firmware name -> where it was found (None: nowhere)
    problems: tuple[Problem, ...] = ()
    search_path: str | None = None  # firmware_class.path as read (None: unreadable or absent)
    kernel_sees: frozenset[str] = frozenset()  # names found where the kernel's loader searches


def locate_firmware(paths: HostPaths, names: list[str], kver: str | None) -> FirmwareFound:
    problems: list[Problem] = []
    custom = noted(problems, lambda: paths.sys.read_text_or_none(str(FIRMWARE_PATH_PARAM), limit=4096), None)
    places = _firmware_roots(paths, kver, (custom or "").strip())
    result: dict[str, str | None] = {}
    seen: set[str] = set()
    for name in names:
        result[name] = None
        for root, directory, kernel_searches in places:
            try:
                if root.is_file(f"{directory}/{name}"):
                    result[name] = str(root.resolve(f"{directory}/{name}"))
                    if kernel_searches:
                        seen.add(name)
                    break
            except HostReadError as exc:
                problems.append(Problem.of(exc))
    search_path = custom.strip("\n") if custom is not None else None
    return FirmwareFound(result, tuple(problems), search_path, frozenset(seen))
