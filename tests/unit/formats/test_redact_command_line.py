"""The kernel command line in every shape it reaches a bug report, and signed URLs' query signatures
(formats/redact.py, formats/cmdline_redact.py): only the NVIDIA arguments stay, whatever separates the
others, and a URL keeps its shape but never its signature or credential."""

from __future__ import annotations

import time

import pytest

from driver_container.formats.redact import redact

SECRET = b"Sx4Wv8Qz"  # in an argument whose name says nothing: only the reduction removes it
NVIDIA = b"nvidia.NVreg_EnableGpuFirmware=0 nvidia-drm.modeset=1"
RULE = b"_" * 44
# nvidia-bug-report.sh's ``append "/proc/cmdline"`` (its append/echo_metadata functions, nvidia-driver-bin
# 535.309.01-0+deb12u1): underscores, an empty line, "*** <file>", "*** ls: <ls -l --full-time>", the
# file, an empty line; then the next file's section.
LS = b"*** ls: -r--r--r-- 1 root root 0 2026-12-07 00:53:00.123456789 +0000 /proc/cmdline"
NEXT_SECTION = RULE + b"\n\n*** /proc/cpuinfo\n*** ls: -r--r--r-- 1 root root 0 2026 /proc/cpuinfo\nprocessor\t: 0\n\n"


def _section(cmdline: bytes) -> bytes:
    return RULE + b"\n\n*** /proc/cmdline\n" + LS + b"\n" + cmdline + b"\n\n" + NEXT_SECTION


def test_the_real_scripts_cmdline_section_keeps_only_the_nvidia_arguments() -> None:
    cmdline = NVIDIA + b" talos.config=https://config.example/m/" + SECRET + b" console=ttyS0"
    redacted, count = redact(_section(cmdline))
    assert SECRET not in redacted
    expected = b"*** /proc/cmdline\n" + LS + b"\n" + NVIDIA + b" <2 other arguments left out>\n\n" + NEXT_SECTION
    assert redacted.endswith(expected), redacted
    assert count == 2


@pytest.mark.parametrize(
    "separator",
    [b"\t", b"\n", b"\r\n", b"\v", b"\f", b"\xa0", b" \n\t "],
    ids=["tab", "newline", "crlf", "vtab", "formfeed", "nbsp", "mixed"],
)
def test_any_kernel_separator_in_the_section_splits_the_arguments(separator: bytes) -> None:
    """lib/cmdline.c next_arg splits at isspace(), which lib/ctype.c gives to \\t-\\r, space and 0xA0."""
    cmdline = b"nvidia.NVreg_X=1" + separator + b"talos.config=https://c.example/" + SECRET + separator + NVIDIA
    redacted, _ = redact(_section(cmdline))
    assert SECRET not in redacted
    assert b"\nnvidia.NVreg_X=1 " + NVIDIA + b" <1 other arguments left out>\n\n" + RULE in redacted, redacted


@pytest.mark.parametrize("escape", [b"\\x09", b"\\x0a", b"\\x0B", b"\\x0d", b"\\x20", b"\\xa0", b"\\xA0"])
def test_kmsg_escaped_separators_split_the_arguments(escape: bytes) -> None:
    """/dev/kmsg escapes control bytes as \\xNN (kernel/printk/printk.c): the text after one is an
    argument of its own, not a part of the NVIDIA argument before it."""
    record = b"[    0.000000] <5> Kernel command line: nvidia.NVreg_X=1" + escape + b"talos.config=" + SECRET
    redacted, count = redact(record + b"\n[    0.1] <6> next\n")
    assert SECRET not in redacted
    kept = b"[    0.000000] <5> Kernel command line: nvidia.NVreg_X=1 <1 other arguments left out>\n"
    assert redacted == kept + b"[    0.1] <6> next\n"
    assert count == 1


def test_an_escaped_backslash_before_x09_is_no_separator() -> None:
    """``\\x5c`` is the kernel's escape of a backslash: ``\\x5cx09`` is the text "\\x09", one word."""
    redacted, _ = redact(b"Kernel command line: nvidia.x=a\\x5cx09b nvidia.y=1\\x09z\n")
    assert redacted == b"Kernel command line: nvidia.x=a\\x5cx09b nvidia.y=1 <1 other arguments left out>\n"


def test_a_record_continued_on_indented_lines_is_reduced_whole() -> None:
    """dmesg and journalctl print a message's further lines indented: a newline inside the command line."""
    text = (
        b"[    0.000000] Kernel command line: nvidia.NVreg_X=1\n               talos.config=" + SECRET + b"\n[ 1] x\n"
    )
    redacted, _ = redact(text)
    assert SECRET not in redacted
    assert redacted == b"[    0.000000] Kernel command line: nvidia.NVreg_X=1 <1 other arguments left out>\n[ 1] x\n"


def test_a_kept_argument_whose_quoted_value_holds_white_space_keeps_its_name_only() -> None:
    """The kernel takes ``"nvidia.NVreg_X=1 talos.config=..."`` as one argument: its value is replaced."""
    redacted, count = redact(b'Kernel command line: "nvidia.NVreg_X=1 talos.config=' + SECRET + b'" ' + NVIDIA + b"\n")
    assert SECRET not in redacted
    assert redacted == b'Kernel command line: "nvidia.NVreg_X=<redacted> ' + NVIDIA + b"\n"
    assert count == 1


def test_a_section_cut_by_the_kill_is_reduced_to_its_end() -> None:
    log = RULE + b"\n\n*** /proc/cmdline\n" + LS + b"\n" + NVIDIA + b" talos.config=" + SECRET
    redacted, _ = redact(log)
    assert SECRET not in redacted and redacted.endswith(NVIDIA + b" <1 other arguments left out>")


# Signed URLs: the query parameter that carries the signature or the credential, per provider.
SIGNED_URLS = {
    "talos metal log line (S3 presigned)": (
        b'[talos] fetching machine config from: "https://cfg.s3.amazonaws.com/n.yaml?X-Amz-Algorithm=AWS4-HMAC-SHA256'
        b"&X-Amz-Credential=AKIA" + SECRET + b"%2F20260101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20260101T000000Z"
        b"&X-Amz-Expires=900&X-Amz-SignedHeaders=host&X-Amz-Signature=" + SECRET.lower() + b'"'
    ),
    "aws session token": b"https://b.s3.amazonaws.com/o?X-Amz-Security-Token=" + SECRET + b"&X-Amz-Signature=00ff",
    "gcs v4": (
        b"https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential=sa%40p.iam."
        b"gserviceaccount.com%2F20260101%2Fauto&X-Goog-Signature=" + SECRET.lower() + b"&X-Goog-Date=1"
    ),
    "azure sas": b"https://a.blob.core.windows.net/c/n.yaml?sv=2022-11-02&sp=r&sig=" + SECRET + b"%2B%3D ok",
    "cloudfront": b"https://d1.cloudfront.net/n.yaml?Expires=1&Signature=" + SECRET + b"__&Key-Pair-Id=K2",
    "url-encoded inside another url": b"next=https%3A%2F%2Fa.example%2Fo%3Fsv%3D1%26sig%3D" + SECRET,
    "json-escaped": b'{"url": "https://a.example/o?sv=1\\u0026sig=' + SECRET + b'"}',
}


@pytest.mark.parametrize("text", SIGNED_URLS.values(), ids=SIGNED_URLS.keys())
def test_a_signed_urls_signature_and_credential_are_redacted(text: bytes) -> None:
    redacted, count = redact(text + b"\n")
    assert SECRET not in redacted and SECRET.lower() not in redacted, redacted
    assert count >= 1
    assert b"<redacted>" in redacted and b"://" in redacted.replace(b"%3A%2F%2F", b"://")


def test_the_talos_line_keeps_the_url_and_its_harmless_parameters() -> None:
    redacted, count = redact(SIGNED_URLS["talos metal log line (S3 presigned)"])
    assert redacted == (
        b'[talos] fetching machine config from: "https://cfg.s3.amazonaws.com/n.yaml?X-Amz-Algorithm=AWS4-HMAC-SHA256'
        b"&X-Amz-Credential=<redacted>&X-Amz-Date=20260101T000000Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host"
        b'&X-Amz-Signature=<redacted>"'
    )
    assert count == 2


def test_modinfo_signature_lines_are_kept() -> None:
    """modinfo's ``signature:`` and ``sig_hashalgo:`` are facts of the module file, not a URL's query."""
    text = b"sig_id:         PKCS#7\nsig_hashalgo:   sha512\nsignature:      30:82:02:A4:06:09\n"
    assert redact(text) == (text, 0)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "crafted",
    [
        b"*** /proc/cmdline\n" * (1 << 16),
        (b"*** /proc/cmdline\n" + RULE + b"\n") * (1 << 15),
        b"Kernel command line: " + b"\\x09a" * (1 << 18),
        b"&sig" * (1 << 18),
        b"&" + b"a" * (1 << 20),
        b"?x-amz-signature" * (1 << 16),
    ],
    ids=["headers", "empty-sections", "escapes", "sig", "long-name", "names"],
)
def test_the_new_patterns_stay_linear(crafted: bytes) -> None:
    started = time.monotonic()
    redact(crafted)
    assert time.monotonic() - started < 5.0
