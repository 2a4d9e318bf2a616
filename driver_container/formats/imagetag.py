"""Image references and this project's tag grammar: pure text in, typed data out.

A reference is ``repository[:tag][@sha256:<64 hex>]``; the repository may start with a registry host and
port (``registry:5000/team/talos-nvidia-driver``), so the tag is what follows the last ``:`` after the last
``/``. The tags this project publishes (docs/image.md, "Published images") name what the image holds:

* ``production-talos<R>``, ``lts-talos<R>``: a channel, on the image of the driver Talos release R ships;
* ``<channel>-<project>-talos<R>``: the same, immutable for one project version;
* ``<driver>``, ``<driver>-talos<R>``, ``<driver>-<project>``, ``<driver>-<project>-talos<R>``: a driver;
* ``manager``, ``manager-<project>``: the version-agnostic driver-manager.

R is a Talos release tag (``v1.13.9``, ``v1.14.0-rc.1``); the operator appends ``-<OS tag>`` to the
driver's version, and a Talos node's OS tag is ``talos<VERSION_ID>`` (NVIDIA/gpu-operator
controllers/object_controls.go ``resolveDriverTag`` at v26.7.0, 10ee5b3638b8). Anything else parses to
``None``: the reader then knows nothing from the tag, which is never an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

Channel = Literal["production", "lts"]
CHANNELS: Final[tuple[Channel, ...]] = ("production", "lts")
MANAGER: Final = "manager"

_SEMVER_PRE: Final = r"(?:-(?!talos)[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?"  # never the -talos<R> suffix
_RELEASE: Final = rf"v\d+\.\d+\.\d+{_SEMVER_PRE}"
_TAG_RE: Final = re.compile(
    r"(?P<head>production|lts|manager|\d+\.\d+(?:\.\d+)?)"
    rf"(?:-(?P<project>\d+\.\d+\.\d+{_SEMVER_PRE}))?"
    rf"(?:-talos(?P<release>{_RELEASE}))?"
)
_DIGEST_RE: Final = re.compile(r"sha256:[0-9a-f]{64}")
_TAG_CHARS: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # the OCI distribution spec's tag
TALOS_RELEASE_RE: Final = re.compile(_RELEASE)


@dataclass(frozen=True, slots=True)
class ImageRef:
    repository: str
    tag: str | None
    digest: str | None  # "sha256:<hex>"


@dataclass(frozen=True, slots=True)
class ImageTag:
    """What one of this project's tags names (exactly one of ``channel``, ``driver``, ``manager``)."""

    channel: Channel | None = None
    driver: str | None = None  # an NVIDIA driver version, e.g. 595.91.07
    manager: bool = False
    project: str | None = None  # the project version of an immutable tag, e.g. 0.1.0
    talos_release: str | None = None  # R of a ``-talos<R>`` suffix, e.g. v1.13.9

    def describe(self) -> str:
        what = self.driver or self.channel or MANAGER
        return what + (f" of project {self.project}" if self.project else "")


def parse_image_ref(text: str) -> ImageRef | None:
    """``repository[:tag][@sha256:<hex>]``; None for anything else (an empty part, two digests, a tag after
    the digest as the operator renders ``image@sha256:…`` with a version appended)."""
    name, at, digest = text.strip().partition("@")
    if at and not _DIGEST_RE.fullmatch(digest):
        return None
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag: str | None = None
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
        if not _TAG_CHARS.fullmatch(tag):
            return None
    if not name or name.endswith("/") or "//" in name or any(c.isspace() for c in name):
        return None
    return ImageRef(name, tag, digest or None)


def parse_tag(tag: str) -> ImageTag | None:
    """What a tag of this project names; None for a tag outside its grammar (``latest``, a digest)."""
    found = _TAG_RE.fullmatch(tag)
    if found is None:
        return None
    head, project, release = found.group("head", "project", "release")
    if head == MANAGER:
        return None if release else ImageTag(manager=True, project=project)
    if head in CHANNELS:
        channel: Channel = "production" if head == "production" else "lts"
        return ImageTag(channel=channel, project=project, talos_release=release)
    return ImageTag(driver=head, project=project, talos_release=release)


def tag_of_image(image: str) -> ImageTag | None:
    """The parsed tag of an image reference; None without one of this project's tags."""
    ref = parse_image_ref(image)
    return parse_tag(ref.tag) if ref is not None and ref.tag is not None else None
