"""Secrets planted in every source ``bug-report`` reads, and inputs crafted against its redaction.

A Talos node's kernel command line carries the machine config's source with its credentials
(siderolabs/talos pkg/machinery/constants/constants.go @ ad8823176e75b9cd07647ddde13c34f2ab77c663:
``talos.config`` a URL, ``talos.config.inline`` the config itself as zstd+base64, ``talos.config.oauth.*``,
``talos.environment``, ``siderolink.api`` with Omni's ``jointoken``), and the kernel prints that line at
boot ("Kernel command line: ...") while NVIDIA's script appends /proc/cmdline. Each source below gets a
distinct secret, in one of the forms a secret takes (URL userinfo, ``key=value``, ``key: value``, JSON,
HTTP headers, ``--option value``, base64 blobs, JWT and PASETO tokens, a PEM key); the archive must hold
none of them, in any encoding, and still hold what NVIDIA support needs.
"""

from __future__ import annotations

import base64
import io
import json
import re
import subprocess
import tarfile
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from helpers.hostenv import Host, make_host

from driver_container.formats.redact import redact
from driver_container.report.model import Budget, Member

TOP = "nvidia-driver-bug-report"
MODULE = "host/usr/lib/modules/6.18.44-talos/kernel/drivers/video/nvidia.ko"
DESCRIPTION = b"Fixture standing for an NVIDIA kernel module (tests only)"
FIRMWARE_ARG = "firmware_class.path=/var/lib/nvidia-firmware"
NVIDIA_ARGS = f"nvidia.NVreg_EnableGpuFirmware=0 nvidia-drm.modeset=1 {FIRMWARE_ARG}"
SCRIPT_LS = "-r--r--r-- 1 root root 0 2026-01-01 00:00:00.000000000 +0000 /proc/cmdline"


def _secret(source: str) -> str:
    """A distinct secret per source, looking like none of the others' (the source in its text)."""
    return f"Sx{source.replace('-', '')}9q"


def _inline_config() -> str:
    """``talos.config.inline``'s value: a machine config with a token, base64 (zstd in real life)."""
    config = f"machine:\n  token: {_secret('inlinetoken')}\n  ca:\n    key: {_secret('inlinecakey')}\n"
    return base64.b64encode(config.encode()).decode()


def _talos_command_line() -> str:
    return " ".join(
        (
            "BOOT_IMAGE=/vmlinuz talos.platform=metal console=ttyS0",
            f"talos.config=https://node:{_secret('configurl')}@config.example/machine?u=${{uuid}}",
            f"talos.config.inline={_inline_config()}",
            f"talos.config.oauth.client_secret={_secret('oauth')}",
            f"talos.config.auth.client_id={_secret('authid')}",
            f"talos.environment=https_proxy=http://proxy:{_secret('proxy')}@proxy.example:3128",
            f"siderolink.api=https://omni.example:8090/?jointoken={_secret('jointoken')}",
            NVIDIA_ARGS,
        )
    )


def _kmsg() -> bytes:
    line = _talos_command_line()
    records = (
        "6,1201,5690716,-;NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  595.91.07",
        f"5,0,0,-;Command line: {line}",
        f"5,1,0,-;Kernel command line: {line}",
        f'5,2,0,-;Unknown kernel command line parameters "{line}", will be passed to user space.',
        f"4,1300,5690800,-;NVRM: GPU at PCI:0000:01:00: token={_secret('kmsg')}",
        # /dev/kmsg escapes a tab (kernel/printk/printk.c): the argument after it is one of its own.
        f"5,3,0,-;Kernel command line: nvidia.NVreg_X=1\\x09talos.config=https://c.example/{_secret('kmsgtab')}",
    )
    return "".join(f"{r}\n" for r in records).encode()


def _paseto() -> str:
    return "v4.public." + base64.urlsafe_b64encode(f'{{"sub":"{_secret("paseto")}"}}'.encode()).decode().rstrip("=")


def _jwt(source: str) -> str:
    part = base64.urlsafe_b64encode(f'{{"sub":"{_secret(source)}"}}'.encode()).decode().rstrip("=")
    return f"eyJhbGciOiJSUzI1NiJ9.{part}.c2lnbmF0dXJl"


def _plant_host(h: Host) -> None:
    """Secrets in the host's and the image's files (before init: it reads some of them)."""
    proc, sys_module = h.root / "proc", h.root / "sys/module/nvidia"
    with (h.root / "host/etc/os-release").open("a") as f:
        f.write(f'SUPPORT_URL="https://support:{_secret("osrelease")}@support.example/"\n')
    with (h.userspace / "etc/os-release").open("a") as f:
        f.write(f'BUG_REPORT_URL="https://bugs.example/?access_token={_secret("imagerelease")}"\n')
    with (proc / "version").open("a") as f:
        f.write(f" (builder {_jwt('procversion')})\n")
    (proc / "sys/kernel").mkdir(parents=True, exist_ok=True)
    (proc / "sys/kernel/tainted").write_text(f"4096\nAuthorization: Bearer {_secret('tainted')}\n")
    with (proc / "modules").open("a") as f:
        f.write(f"nvidia_peermem 16384 0 - Live 0x0 (O) secret={_secret('procmodules')}\n")
    (sys_module / "parameters").mkdir(exist_ok=True)
    (sys_module / "parameters/NVreg_RegistryDwords").write_text(f'RmPassword="{_secret("sysparam")}"\n')
    with (proc / "driver/nvidia/params").open("a") as f:
        f.write(f'RegistryDwordsPerDevice: "x-api-key: {_secret("procparams")}"\n')
    (proc / "driver/nvidia/registry").write_text(f"Binary: \"\"\nsession_id='{_secret('registry')}'\n")
    info = next((proc / "driver/nvidia/gpus").iterdir()) / "information"
    with info.open("a") as f:
        f.write(f'Notes: {{"apiKey": "{_secret("gpuinfo")}"}}\n')
    caps = proc / "driver/nvidia/capabilities/mig"
    caps.mkdir(parents=True)
    (caps / "config").write_text(f"DeviceFileMinor: 1\ncookie={_secret('capabilities')}\n")
    ko = h.root / MODULE
    description = f"credential={_secret('modinfo')}".encode().ljust(len(DESCRIPTION))
    ko.write_bytes(ko.read_bytes().replace(DESCRIPTION, description, 1))
    # A ConfigMap value init logs verbatim (on Talos it is never applied): into init's log file.
    (h.root / "drivers/nvidia.conf").write_text(f'NVreg_RegistryDwords="RMSecretKey={_secret("conf")}"\n')


def _plant_run_dir(h: Host) -> None:
    """Secrets in RUN_DIR's state files and init's log (after init: it rewrites them)."""
    run = h.run_dir
    (run / "nvidia-driver.state").write_text(f"digest=x\nprivate_key: {_secret('state')}\n")
    (run / "nvidia-driver.pid").write_text(f"1\n--token {_secret('pid')}\n")
    (run / "nvidia-driver.publish-failed").write_text(
        json.dumps({"error": f"pull https://puller:{_secret('publishfailed')}@registry.example/x failed"})
    )
    (run / "nvidia-driver.verify.json").write_text(
        json.dumps(
            {"ok": True, "mismatches": [{"path": "usr/lib/x", "reason": f"Cookie: session={_secret('verify')}"}]}
        )
    )
    (run / "nvidia-driver.module-verdict.json").write_text(json.dumps({"password": _secret("verdict")}))
    (run / "validations" / f"api_token={_secret('validations')}").write_text("")
    with (run / "nvidia-driver.log").open("a") as f:
        f.write(f"2026-01-01T00:00:00+0000 INFO    GET /api Authorization: Bearer {_secret('logbearer')}\n")
        f.write(f"2026-01-01T00:00:00+0000 INFO    omni token {_paseto()}\n")
        f.write(f"2026-01-01T00:00:00+0000 INFO    ran helper --password {_secret('logoption')}\n")
        f.write("-----BEGIN EC PRIVATE KEY-----\n" + base64.b64encode(_secret("pem").encode() * 4).decode() + "\n")
    (run / "nvidia-driver.log.1").write_text(f'{{"client_secret": "{_secret("rotatedlog")}"}}\n')
    manifest = h.driver_root / ".driver-container/manifest.json"
    text = manifest.read_text()
    manifest.write_text(text.replace('"source": "', f'"source": "https://cache:{_secret("manifest")}@cache.example', 1))


def _plant_script(h: Host) -> None:
    """An nvidia-bug-report.sh stand-in that appends /proc/cmdline as NVIDIA's does (a section: a line of
    underscores, ``*** /proc/cmdline``, ``*** ls: ...``, the file, an empty line), then a section with a
    header in it, and prints a cookie."""
    script = h.userspace / "usr/bin/nvidia-bug-report.sh"
    rule = "_" * 44
    lines = (rule, "", "*** /proc/cmdline", f"*** ls: {SCRIPT_LS}", _talos_command_line(), "", rule, "")
    lines += ("*** /var/log/some.log", "*** ls: -rw-r--r-- 1 root root 1 2026-01-01 /var/log/some.log")
    lines += (f"X-Auth-Token: {_secret('scriptlog')}", "", rule, "", "dmesg:")
    lines += (f"[    3.104702] [talos] fetching machine config from: {json.dumps(_signed_config_url())}", "")
    quoted = " ".join(f"'{line}'" for line in lines)
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' {quoted} > \"$2\"\necho 'Set-Cookie: {_secret('scriptout')}'\n")
    script.chmod(0o755)


def _signed_config_url() -> str:
    """A presigned S3 URL as ``talos.config`` (Talos logs it: "fetching machine config from: %q")."""
    return (
        "https://cfg.s3.amazonaws.com/node.yaml?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        f"&X-Amz-Credential={_secret('amzcred')}%2F20260101%2Fus-east-1%2Fs3%2Faws4_request"
        f"&X-Amz-Date=20260101T000000Z&X-Amz-SignedHeaders=host&X-Amz-Signature={_secret('amzsig')}"
    )


def _secrets() -> list[str]:
    names = (
        "inlinetoken",
        "inlinecakey",
        "configurl",
        "oauth",
        "authid",
        "proxy",
        "jointoken",
        "kmsg",
        "kmsgtab",
        "amzcred",
        "amzsig",
        "paseto",
        "procversion",
        "osrelease",
        "imagerelease",
        "tainted",
        "procmodules",
        "sysparam",
        "procparams",
        "registry",
        "gpuinfo",
        "capabilities",
        "modinfo",
        "conf",
        "state",
        "pid",
        "publishfailed",
        "verify",
        "verdict",
        "validations",
        "logbearer",
        "logoption",
        "pem",
        "rotatedlog",
        "manifest",
        "scriptlog",
        "scriptout",
        "environment",
        "index",
    )
    return [_secret(n) for n in names]


def _files(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name.removeprefix(f"{TOP}/"): tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]


def _forms(secret: str) -> set[bytes]:
    """The secret, URL-encoded, and base64-encoded (standard and URL-safe) at each of the three
    alignments: the quads that hold its bytes only, which any base64 text carrying it contains."""
    raw = secret.encode()
    forms = {raw, quote(secret).encode()}
    for k in range(3):
        first, last = -(-k // 3), (k + len(raw)) // 3  # the byte triples wholly inside the secret
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            forms.add(encode(b"\0" * k + raw)[4 * first : 4 * last])
    return forms


def test_a_secret_planted_in_every_source_reaches_no_byte_of_the_archive(tmp_path: Path) -> None:
    h = make_host(tmp_path / "h")
    _plant_host(h)
    # KMSG_PATH's own name is a source too: it is the kernel log's "source" in index.json and README.txt.
    kmsg_dir = tmp_path / f"access_token={_secret('index')}"
    kmsg_dir.mkdir()
    (kmsg_dir / "kmsg").write_bytes(_kmsg())
    h.env["KMSG_PATH"] = str(kmsg_dir / "kmsg")
    h.env["NVFM_CONFIG_DATABASE"] = f"https://db:{_secret('environment')}@db.example/fm"
    init = h.run("init", "--no-wait", timeout=90)
    assert init.returncode == 0, init.stderr
    _plant_run_dir(h)
    _plant_script(h)
    log = (h.run_dir / "nvidia-driver.log").read_text()
    assert _secret("conf") in log  # the ConfigMap's value did reach init's log: the source is live
    done = subprocess.run(
        h.argv("bug-report", "-o", "-"), env=h.env, cwd=h.base, capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    files = _files(done.stdout)
    leaks = {
        f"{name}: {secret}"
        for name, data in files.items()
        for secret in _secrets()
        for form in _forms(secret)
        if form in data
    }
    leaks |= {f"{name}: the inline config" for name, data in files.items() if _inline_config().encode() in data}
    assert not leaks, "leaked:\n" + "\n".join(sorted(leaks))
    _assert_useful_facts_kept(files)


def _assert_useful_facts_kept(files: dict[str, bytes]) -> None:
    kernel = files["kernel/nvidia-messages.txt"].decode()
    assert "NVRM: loading NVIDIA UNIX Open Kernel Module" in kernel
    assert f"Kernel command line: {NVIDIA_ARGS} <9 other arguments left out>" in kernel
    assert f"Command line: {NVIDIA_ARGS} <9 other arguments left out>" in kernel
    assert "NVRM: GPU at PCI:0000:01:00: token=<redacted>" in kernel
    assert "Kernel command line: nvidia.NVreg_X=1 <1 other arguments left out>\n" in kernel
    script_log = files["nvidia-bug-report/nvidia-bug-report.log"].decode()
    section = f"*** /proc/cmdline\n*** ls: {SCRIPT_LS}\n{NVIDIA_ARGS} <9 other arguments left out>\n\n{'_' * 44}\n"
    assert section in script_log
    assert "X-Auth-Token: <redacted>" in script_log  # the next section is its own
    assert 'fetching machine config from: "https://cfg.s3.amazonaws.com/node.yaml?' in script_log
    assert '&X-Amz-Signature=<redacted>"' in script_log
    assert "version:        595.91.07" in files["modules/modinfo.txt"].decode()
    manifest = json.loads(files["driver-root/manifest.json"])  # still JSON, digests untouched
    assert all(re.fullmatch(r"[0-9a-f]{64}", f["sha256"]) for f in manifest["files"] if f.get("sha256"))
    assert json.loads(files["status.json"])["platform"]
    environment = json.loads(files["environment.json"])["environment"]
    assert environment["NVFM_CONFIG_DATABASE"] == "https://<redacted>@db.example/fm"
    assert "GPU UUID:" in files["host/proc/driver/nvidia/gpus/0000:01:00.0/information"].decode()


# Crafted members against the redaction itself: each pattern once tried at every byte of one long word
# (``name=`` scanned from every letter, ``eyJ`` at every third) made it quadratic: 40 KB took 50 s.
CRAFTED = (b"a" * (1 << 20), b"eyJa" * (1 << 18), b'token="' * (1 << 17), b"x://" * (1 << 18))


@pytest.mark.timeout(60)
def test_redaction_is_linear_in_crafted_input() -> None:
    for data in CRAFTED:
        started = time.monotonic()
        redact(data)
        assert time.monotonic() - started < 5.0, data[:16]


@pytest.mark.timeout(90)
def test_bug_report_with_crafted_members_ends_within_its_deadline(tmp_path: Path) -> None:
    h = make_host(tmp_path / "h")
    (tmp_path / "kmsg").write_bytes(b"6,1,1,-;NVRM: " + b"a" * 4000 + b"\n")
    h.env["KMSG_PATH"] = str(tmp_path / "kmsg")
    h.run_dir.mkdir(parents=True, exist_ok=True)
    (h.run_dir / "nvidia-driver.log").write_bytes(CRAFTED[0])
    (h.run_dir / "nvidia-driver.log.1").write_bytes(CRAFTED[1])
    (h.root / "proc/driver/nvidia/params").write_bytes(CRAFTED[2])
    started = time.monotonic()
    try:
        done = subprocess.run(
            h.argv("bug-report", "--timeout", "10", "-o", "-"),
            env=h.env,
            cwd=h.base,
            capture_output=True,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("bug-report --timeout 10 still running after 60 s") from None
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 20.0
    assert "run/nvidia-driver.log" in _files(done.stdout)


@pytest.mark.timeout(60)
def test_a_member_is_redacted_only_near_what_it_keeps_and_a_secret_at_the_cut_whole() -> None:
    """A 1 MiB member cut to 64 KiB: the 4 MiB word past the cut is never redacted (it made admission
    take hours), and the secret that the cut splits is redacted whole, keeping the start or the end."""
    cap, secret, crafted = 64 << 10, SECRET.encode(), b"a" * (4 << 20)
    head = b"x" * (cap - 10) + b" token=" + secret + b" next\n"  # the cut falls 3 bytes into the secret
    tail = b"\npassword=" + secret + b" " + b"y" * (cap - 5)  # the end kept starts 4 bytes before its end
    started = time.monotonic()
    first = Budget(1 << 30).admit(Member("a", "a", head + crafted), cap)
    last = Budget(1 << 30).admit(Member("b", "b", crafted + tail), cap, keep_end=True)
    assert time.monotonic() - started < 5.0
    assert first.data is not None and last.data is not None
    assert len(first.data) == len(last.data) == cap and first.data.startswith(b"xxx")
    assert secret[:3] not in first.data and first.data.endswith(b" token=<re"), first.data[-20:]
    assert secret[-4:] not in last.data and last.data.startswith(b"ted> yyy"), last.data[:20]
    assert first.redactions == last.redactions == 1
    assert "truncated at 65536 bytes" in first.note and "the oldest left out" in last.note


SECRET = "Sx7Kq2Lm9"
BLOB = base64.b64encode(b"machine:\n  token: " + SECRET.encode() + b"\n  ca: {key: x}\n" * 2).decode()
# (text with SECRET in it, what must stay of the text): each form is missed by name=value-only redaction.
FORMS = (
    (f"talos.config=https://node:{SECRET}@config.example/m", "@config.example/m"),
    (f'token="{SECRET} with spaces" next', "next"),
    (f"  password: {SECRET}\nnext: 1", "next: 1"),
    (f"X-Auth-Token: {SECRET}", "X-Auth-Token: "),
    (json.dumps({"message": f'RmPassword="{SECRET}" is set', "n": 1}), '"n": 1'),
    (json.dumps({"inner": json.dumps({"apiKey": SECRET})}), '{"inner": "{'),
    (f"ran helper --password {SECRET} --verbose", "--verbose"),
    (f"next=%2F%3Faccess_token%3D{SECRET}%26x", "next="),
    (f"omni v4.public.{base64.urlsafe_b64encode(SECRET.encode() * 3).decode()} ok", " ok"),
    (f"-----BEGIN EC PRIVATE KEY-----\n{base64.b64encode(SECRET.encode() * 5).decode()}\n-----END", "-----END"),
    (f"talos.config.inline={BLOB} console=ttyS0", "console=ttyS0"),
    (f"sha256 {'ab12' * 16} /tmp/r40p/userspace/etc/OpenCL/vendors/nvidia {BLOB}", f"sha256 {'ab12' * 16} /tmp/"),
)


@pytest.mark.parametrize(("text", "kept"), FORMS)
def test_each_secret_form_is_redacted_in_place(text: str, kept: str) -> None:
    redacted, count = redact(text.encode())
    assert [form for form in _forms(SECRET) if form in redacted] == [], redacted
    assert count >= 1 and kept.encode() in redacted, redacted
