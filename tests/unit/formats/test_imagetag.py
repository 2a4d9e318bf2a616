"""Image references and this project's tag grammar (docs/image.md, "Published images")."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from driver_container.formats.imagetag import ImageRef, ImageTag, parse_image_ref, parse_tag, tag_of_image

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("tag", "named"),
    [
        ("production-talosv1.13.9", ImageTag(channel="production", talos_release="v1.13.9")),
        ("lts-talosv1.14.0-rc.1", ImageTag(channel="lts", talos_release="v1.14.0-rc.1")),
        ("595.91.07-talosv1.13.9", ImageTag(driver="595.91.07", talos_release="v1.13.9")),
        ("595.91.07", ImageTag(driver="595.91.07")),
        ("595.91.07-0.1.0", ImageTag(driver="595.91.07", project="0.1.0")),
        ("595.91.07-0.1.0-talosv1.13.9", ImageTag(driver="595.91.07", project="0.1.0", talos_release="v1.13.9")),
        ("production-0.2.0-talosv1.13.9", ImageTag(channel="production", project="0.2.0", talos_release="v1.13.9")),
        # a project pre-release never swallows the -talos<R> suffix
        (
            "lts-0.2.0-rc.1-talosv1.14.0-rc.1",
            ImageTag(channel="lts", project="0.2.0-rc.1", talos_release="v1.14.0-rc.1"),
        ),
        ("manager", ImageTag(manager=True)),
        ("manager-0.1.0", ImageTag(manager=True, project="0.1.0")),
        ("latest", None),
        ("manager-talosv1.13.9", None),  # the manager's tag carries no OS suffix (the operator appends none)
        ("production-ubuntu24.04", None),  # another OS's tag: nothing of this project's grammar
        ("production-talos1.13.9", None),  # R keeps its v
        ("595.91.07-talosv1.13", None),
        ("", None),
    ],
)
def test_tags_name_what_the_release_publishes(tag: str, named: ImageTag | None) -> None:
    assert parse_tag(tag) == named


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        (
            "ghcr.io/o/talos-nvidia-driver:production-talosv1.13.9",
            ImageRef("ghcr.io/o/talos-nvidia-driver", "production-talosv1.13.9", None),
        ),
        ("registry:5000/team/driver", ImageRef("registry:5000/team/driver", None, None)),  # a port is no tag
        ("registry:5000/team/driver:595.91.07", ImageRef("registry:5000/team/driver", "595.91.07", None)),
        (f"ghcr.io/o/d@{DIGEST}", ImageRef("ghcr.io/o/d", None, DIGEST)),
        (f"ghcr.io/o/d:manager@{DIGEST}", ImageRef("ghcr.io/o/d", "manager", DIGEST)),
        (f"ghcr.io/o/d@{DIGEST}:595.91.07", None),  # what the operator makes of image@digest + version
        ("ghcr.io/o/d@sha256:abc", None),
        ("ghcr.io/o/d:", None),
        ("", None),
        ("a b:c", None),
    ],
)
def test_references(text: str, ref: ImageRef | None) -> None:
    assert parse_image_ref(text) == ref


def test_tag_of_image_is_none_without_a_tag_of_ours() -> None:
    assert tag_of_image(f"ghcr.io/o/d@{DIGEST}") is None
    assert tag_of_image("nvcr.io/nvidia/driver:580.105.08-ubuntu24.04") is None
    assert tag_of_image("ghcr.io/o/d:lts-talosv1.12.0") == ImageTag(channel="lts", talos_release="v1.12.0")


_release = st.builds(
    lambda a, b, c, pre: f"v{a}.{b}.{c}" + (f"-rc.{pre}" if pre is not None else ""),
    st.integers(0, 99),
    st.integers(0, 99),
    st.integers(0, 99),
    st.none() | st.integers(0, 9),
)
_driver = st.builds(lambda a, b, c: f"{a}.{b}.{c:02d}", st.integers(100, 999), st.integers(0, 999), st.integers(0, 99))
_project = st.none() | st.builds(
    lambda a, b, c: f"{a}.{b}.{c}", st.integers(0, 9), st.integers(0, 99), st.integers(0, 99)
)


@given(head=st.sampled_from(["production", "lts"]) | _driver, project=_project, release=st.none() | _release)
def test_every_published_form_round_trips(head: str, project: str | None, release: str | None) -> None:
    tag = head + (f"-{project}" if project else "") + (f"-talos{release}" if release else "")
    named = parse_tag(tag)
    assert named is not None
    assert (named.channel or named.driver) == head and named.project == project and named.talos_release == release
    ref = parse_image_ref(f"registry:5000/o/talos-nvidia-driver:{tag}@{DIGEST}")
    assert ref == ImageRef("registry:5000/o/talos-nvidia-driver", tag, DIGEST)


@given(st.text(max_size=80))
def test_any_text_parses_or_is_none(text: str) -> None:
    named = parse_tag(text)
    assert named is None or sum((named.channel is not None, named.driver is not None, named.manager)) == 1
    ref = parse_image_ref(text)
    assert ref is None or (ref.repository and ":" not in (ref.tag or ""))
