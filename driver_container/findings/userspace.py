"""The finding when the image's NVIDIA userspace was not found (inspect/userspace.py): pure.

Missing and unreadable are told apart: the userspace scan keeps every place it could not read
(``UserspaceVersion.problems``: EMFILE, EIO, EACCES, anything but ENOENT/ENOTDIR, base/fileread.py), and a
library there may well exist, so that is never reported as missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from driver_container.findings.model import Finding

if TYPE_CHECKING:
    from driver_container.inspect.userspace import UserspaceVersion

SHOWN_PROBLEMS = 5  # unreadable paths named in USERSPACE_UNREADABLE; the count is exact


def userspace_absent(us: UserspaceVersion) -> Finding:
    """USERSPACE_MISSING only when every place was read and none holds the libraries; a place that could
    not be read (EMFILE, EIO, EACCES: anything but ENOENT/ENOTDIR, base/fileread.py) may hold them, and that
    is USERSPACE_UNREADABLE, naming each path and what the OS said."""
    if us.problems:
        shown = "; ".join(str(p) for p in us.problems[:SHOWN_PROBLEMS])
        more = f"; and {len(us.problems) - SHOWN_PROBLEMS} more" if len(us.problems) > SHOWN_PROBLEMS else ""
        return Finding(
            "error",
            "USERSPACE_UNREADABLE",
            f"the NVIDIA userspace under USERSPACE_ROOT={us.root} could not be looked for: {shown}{more}",
            "an I/O error, not a missing library: on EMFILE/ENFILE raise the container's open-file limit "
            "(RLIMIT_NOFILE) or the node's fs.file-max, on ENOMEM give the pod memory, on EIO check the image's "
            "storage; then restart the driver pod",
        )
    return Finding(
        "error",
        "USERSPACE_MISSING",
        f"no libcuda.so.<version> or libnvidia-ml.so.<version> under USERSPACE_ROOT={us.root}",
        "set USERSPACE_ROOT to the image root holding the NVIDIA userspace, or use an image that has it",
    )
