"""rootdir.parse_mount_points on /proc/self/mountinfo text (proc(5) format, kernel octal escapes)."""

from __future__ import annotations

from driver_container.formats.kernel.mountinfo import parse_mount_points

MOUNTINFO = (
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "30 22 0:25 / /run rw,nosuid,nodev shared:5 - tmpfs tmpfs rw,mode=755\n"
    "41 30 0:40 /merged /run/nvidia/driver rw,relatime shared:20 - overlay overlay rw,lowerdir=/a\n"
    "42 41 0:40 /merged /run/nvidia/driver rw,relatime shared:20 - overlay overlay rw,lowerdir=/a\n"
    r"43 30 0:41 / /run/with\040space\011tab\134back rw - tmpfs tmpfs rw"
    "\n"
    "truncated line\n"
    "\n"
)


def test_mount_points_in_order_with_duplicates() -> None:
    points = parse_mount_points(MOUNTINFO)
    assert points == ["/", "/run", "/run/nvidia/driver", "/run/nvidia/driver", "/run/with space\ttab\\back"]


def test_stacked_mounts_are_counted() -> None:
    assert parse_mount_points(MOUNTINFO).count("/run/nvidia/driver") == 2


def test_empty_text() -> None:
    assert parse_mount_points("") == []
