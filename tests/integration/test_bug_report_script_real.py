"""NVIDIA's own nvidia-bug-report.sh (Debian's nvidia-driver-bin, scripts/fetch-nvidia-bug-report.sh)
writes /proc/cmdline into its log with its own section writer, and the redaction reduces that section.

The script's ``append`` (with ``echo_metadata``, and ``report_file`` where a version has it) is taken from
the real file as it is and run by /bin/sh with ``GZIP_CMD=cat``, as the script runs it when gzip is
missing; only ``cat`` of /proc/cmdline is answered from a fixture (a shell function in front of the
command), so the header, the ``*** ls:`` line and the layout are the script's own.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from helpers.support import ARTEFACTS, require

from driver_container.formats.redact import redact

SCRIPT = ARTEFACTS / "nvidia-bug-report" / "nvidia-bug-report.sh"
FUNCTIONS = ("echo_metadata", "report_file", "append")
SECRET = "Sx5Rt7Kp"
# A Talos command line with the config's URL, a tab and a newline between arguments, and the NVIDIA ones.
CMDLINE = (
    f"BOOT_IMAGE=/vmlinuz talos.platform=metal talos.config=https://config.example/node/{SECRET}?u=1\t"
    "nvidia.NVreg_EnableGpuFirmware=0\n"
    f"siderolink.api=https://omni.example/?x={SECRET} nvidia-drm.modeset=1 console=ttyS0\n"
)
HARNESS = """GZIP_CMD=cat
LOG_FILENAME="$1"
{functions}
cat() {{
    if [ "$1" = /proc/cmdline ]; then command cat "$CMDLINE_FIXTURE"; else command cat "$@"; fi
}}
append /proc/cmdline
append "$NEXT_FILE"
"""


def _functions(script: str) -> str:
    """The definitions of ``FUNCTIONS`` the script has, verbatim (each from ``name() {`` to its ``}``)."""
    found = []
    for name in FUNCTIONS:
        match = re.search(rf"^{name}\(\) \{{\n.*?^\}}\n", script, re.MULTILINE | re.DOTALL)
        if match:
            found.append(match.group(0))
    assert any(f.startswith("append()") for f in found), "the script has no append function"
    return "\n".join(found)


@pytest.mark.artefact
@pytest.mark.timeout(60)
def test_the_real_scripts_cmdline_section_is_reduced_to_the_nvidia_arguments(tmp_path: Path) -> None:
    require(SCRIPT.is_file(), "NVIDIA's nvidia-bug-report.sh", how="scripts/fetch-nvidia-bug-report.sh")
    require(Path("/proc/cmdline").is_file(), "/proc/cmdline (the script's append checks it is a file)")
    harness = tmp_path / "harness.sh"
    harness.write_text(HARNESS.format(functions=_functions(SCRIPT.read_text())))
    fixture, next_file, log = tmp_path / "cmdline", tmp_path / "next.conf", tmp_path / "nvidia-bug-report.log"
    fixture.write_text(CMDLINE)
    next_file.write_text(f"api_token={SECRET}\nkept: yes\n")
    done = subprocess.run(
        ["/bin/sh", str(harness), str(log)],
        env={"PATH": "/usr/bin:/bin", "CMDLINE_FIXTURE": str(fixture), "NEXT_FILE": str(next_file), "LANG": "C"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    written = log.read_bytes()
    assert b"*** /proc/cmdline\n*** ls: " in written and SECRET.encode() in written  # the script's own shape
    redacted, _count = redact(written)
    assert SECRET.encode() not in redacted, redacted.decode()
    section = re.search(rb"\*\*\* /proc/cmdline\n\*\*\* ls: [^\n]*/proc/cmdline\n(.*?)\n\n_{44}\n", redacted, re.S)
    assert section is not None, redacted.decode()
    assert section.group(1) == b"nvidia.NVreg_EnableGpuFirmware=0 nvidia-drm.modeset=1 <5 other arguments left out>"
    assert f"*** {next_file}\n".encode() in redacted and b"api_token=<redacted>\nkept: yes\n" in redacted
