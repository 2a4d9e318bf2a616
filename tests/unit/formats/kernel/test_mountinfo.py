"""kernel/mountinfo.py: /proc/self/mountinfo lines as the kernel writes them (fs/proc_namespace.c,
show_mountinfo()), the mount that holds a path, the visible one of stacked mounts."""

from __future__ import annotations

from driver_container.formats.kernel.mountinfo import Mount, mount_containing, parse_line, parse_mountinfo, top_mount_at

# Lines as seen from a driver pod on a Talos node. /run: PseudoLate's tmpfs (siderolabs/talos
# internal/pkg/mount/v3/helpers.go: nosuid,nodev via WithSecure, noexec, relatime, mode=0755; made with
# fsopen and no source, which the kernel prints as "none"). /run/nvidia: the kubelet's Bidirectional
# hostPath bind (root /nvidia, shared). The last two: this project's tmpfs and a leftover rbind of
# NVIDIA's driver container (its overlay root and one of its submounts).
TALOS_POD = (
    "1021 985 0:301 / / rw,relatime master:412 - overlay overlay rw,lowerdir=/var/lib/containerd/l1\n"
    "1022 1021 0:305 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n"
    "1030 1021 0:26 /nvidia /run/nvidia rw,nosuid,nodev,noexec,relatime shared:18 - tmpfs none rw,seclabel,mode=755\n"
    "1040 1030 0:52 / /run/nvidia/driver rw,nosuid,relatime shared:44 - tmpfs nvidia-driver-root rw,mode=755\n"
    "1041 1040 0:301 / /run/nvidia/driver rw,relatime shared:412 - overlay overlay rw,lowerdir=/var/lib/l2\n"
    "1042 1041 0:305 / /run/nvidia/driver/proc rw,nosuid,nodev,noexec - proc proc rw\n"
)
# This machine's own lines (Debian, docker): a root without optional fields and a bind of a file.
HOST_LINES = (
    "27 1 0:30 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w\n"
    "103 85 0:40 /fwpath /sys/module/firmware_class/parameters/path rw,nosuid,nodev,noexec,relatime - tmpfs x rw\n"
)


def test_talos_run_line_in_every_field() -> None:
    run = parse_line(TALOS_POD.splitlines()[2])
    assert run == Mount(
        mount_id=1030,
        parent_id=1021,
        root="/nvidia",
        mount_point="/run/nvidia",
        options=("rw", "nosuid", "nodev", "noexec", "relatime"),
        propagation=("shared:18",),
        fstype="tmpfs",
        source="none",
        super_options=("rw", "seclabel", "mode=755"),
    )
    assert run.shared and run.has("noexec") and not run.has("exec")


def test_no_optional_fields_and_several_of_them() -> None:
    root = parse_line(HOST_LINES.splitlines()[0])
    assert root is not None and root.propagation == () and not root.shared
    both = parse_line("5 1 0:3 / /x rw shared:3 master:1 - tmpfs t rw")
    assert both is not None and both.propagation == ("shared:3", "master:1") and both.shared
    slave = parse_line("5 1 0:3 / /x rw master:1 - tmpfs t rw")
    assert slave is not None and not slave.shared  # HostToContainer: nothing propagates back to the host


def test_octal_escapes_in_root_mount_point_and_source() -> None:
    line = r"43 30 0:41 /a\040b /run/with\040space\011tab\134back rw - tmpfs my\040src rw"
    m = parse_line(line)
    assert m is not None
    assert (m.root, m.mount_point, m.source) == ("/a b", "/run/with space\ttab\\back", "my src")


def test_malformed_lines_are_skipped() -> None:
    text = "truncated line\n\n1 2 3 4 5 6 7\nx 1 0:1 / / rw - ext4 /dev/a rw\n1 0 0:1 / / rw - ext4\n" + HOST_LINES
    assert [m.mount_point for m in parse_mountinfo(text)] == ["/", "/sys/module/firmware_class/parameters/path"]
    assert parse_line("1 0 0:1 / / rw - ext4 /dev/a") is not None  # no super options: still a mount


def test_the_visible_one_of_stacked_mounts_is_the_one_nothing_sits_on() -> None:
    mounts = parse_mountinfo(TALOS_POD)
    top = top_mount_at(mounts, "/run/nvidia/driver")
    assert top is not None and top.mount_id == 1041
    # The same stack listed the other way round (the kernel lists in mount order; do not rely on it).
    reverse = top_mount_at(list(reversed(mounts)), "/run/nvidia/driver")
    assert reverse is not None and reverse.mount_id == 1041
    assert top_mount_at(mounts, "/nowhere") is None


def test_the_mount_holding_a_path_is_the_longest_mount_point_above_it() -> None:
    mounts = parse_mountinfo(TALOS_POD)
    assert _id(mount_containing(mounts, "/run/nvidia/validations")) == 1030
    assert _id(mount_containing(mounts, "/run/nvidia/driver/usr/bin")) == 1041
    assert _id(mount_containing(mounts, "/run/nvidia/driver")) == 1041
    assert _id(mount_containing(mounts, "/run/nvidia-fabricmanager")) == 1021  # a prefix, not a parent
    assert _id(mount_containing(mounts, "/run/nvidia/")) == 1030
    assert mount_containing([], "/run") is None


def _id(mount: Mount | None) -> int | None:
    return None if mount is None else mount.mount_id


def test_ids_that_are_not_ascii_numbers_make_the_line_malformed() -> None:
    assert parse_line("\u00b2 1 0:1 / / rw - ext4 /dev/a rw") is None  # str.isdigit() would accept it
