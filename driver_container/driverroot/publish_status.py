"""What ``status`` reads about DRIVER_ROOT's publish: the manifest's version, the last failure, a journal left."""

from __future__ import annotations

from driver_container.base.paths import HostPaths
from driver_container.base.records import NamedRecord
from driver_container.driverroot.journal import interrupted
from driver_container.driverroot.manifest import read_manifest
from driver_container.runtime.statusfiles import read_publish_failure


class PublishStatus(NamedRecord):
    """What ``status`` says about DRIVER_ROOT: the published version (from its manifest, read bounded and
    without following links), the last failed publish, and whether one was interrupted (journal left)."""

    version: str | None
    failure: tuple[str, str] | None
    interrupted: bool


def read_publish_status(paths: HostPaths) -> PublishStatus:
    _text, manifest = read_manifest(paths.driver_root)
    return PublishStatus(
        manifest.version if manifest else None, read_publish_failure(paths), interrupted(paths.driver_root)
    )
