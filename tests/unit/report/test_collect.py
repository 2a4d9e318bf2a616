"""The whole report, in-process on a fixture host (report/collect.py): every member and its index entry,
no secret anywhere in the archive, the size cap and the deadline held whatever a step does."""

from __future__ import annotations

import inspect
import json
import re
import time
from pathlib import Path

from report_support import add_script, index_of, report_host, unpack

from driver_container.base.errors import HostReadError
from driver_container.base.paths import HostPaths
from driver_container.report.collect import ReportOptions, collect_report
from driver_container.report.environment import environment_member, settings_env_names
from driver_container.settings import Settings

SECRETS = (
    "eyJhbGciOiJSUzI1NiJ9.c2VydmljZS1hY2NvdW50.c2lnbmF0dXJl",
    "omni-join-7f3a9c",
    "hunter2-password",
    "kubeconfig-client-key-data",
    "aws-secret-value",
)
STATUS = '{\n  "platform": {"name": "talos"}\n}\n'


def _status() -> str:
    return STATUS


def _planted(tmp_path: Path) -> tuple[dict[str, str], HostPaths]:
    """A host carrying every secret where a careless report would find it."""
    paths = report_host(tmp_path)
    account = paths.host_root / "var/run/secrets/kubernetes.io/serviceaccount"
    account.mkdir(parents=True)
    (account / "token").write_text(SECRETS[0])
    (paths.procfs_root / "cmdline").write_text(
        f"talos.platform=metal siderolink.api=https://omni.example:8090/?jointoken={SECRETS[1]} console=ttyS0\n"
    )
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(f"users:\n- user:\n    client-key-data: {SECRETS[3]}\n")
    # NVIDIA's script appends /proc/cmdline (the stand-in does it with the fixture's): redacted on the way in.
    add_script(paths, f'cat {paths.procfs_root / "cmdline"} {account / "token"} | gzip -c > "$2.gz"\n')
    env = {
        "RUN_DIR": str(paths.run_dir),
        "KUBECONFIG": str(kubeconfig),
        "REGISTRY_PASSWORD": SECRETS[2],
        "AWS_SECRET_ACCESS_KEY": SECRETS[4],
        "NVFM_CONFIG_TOKEN": SECRETS[4],
        "DRIVER_VERSION": "535.309.01",
    }
    return env, paths


def test_no_secret_reaches_any_byte_of_the_archive(tmp_path: Path) -> None:
    env, paths = _planted(tmp_path)
    data = collect_report(paths, ReportOptions(deadline_s=30), _status, env)
    files = unpack(data)
    everything = b"".join(files.values())
    for secret in SECRETS:
        assert secret.encode() not in everything, secret
    index = index_of(files)
    bug_log = files["nvidia-bug-report/nvidia-bug-report.log"]
    assert b"jointoken=<redacted>" in bug_log and index["nvidia-bug-report/nvidia-bug-report.log"]["redacted"] == 2
    shown = json.loads(files["environment.json"])["environment"]
    assert shown == {"RUN_DIR": str(paths.run_dir), "DRIVER_VERSION": "535.309.01", "NVFM_CONFIG_TOKEN": "<redacted>"}


def test_every_member_is_in_the_index_with_its_source_and_why(tmp_path: Path) -> None:
    paths = report_host(tmp_path)
    files = unpack(collect_report(paths, ReportOptions(run_bug_script=False), _status, {}))
    index = index_of(files)
    assert files["status.json"] == STATUS.encode()
    assert set(files) - {"index.json", "README.txt"} == {n for n, m in index.items() if m["included"]}
    for name, entry in index.items():
        assert entry["source"], name
        assert entry["included"] or entry["note"], name
        assert not entry["included"] or entry["size"] == len(files[name]), name
    assert index["driver-root/manifest.json"]["note"] == "absent"
    verification = json.loads(files["verification.json"])
    assert verification["published"] is False
    kernel = files["kernel/nvidia-messages.txt"]
    assert b"NVRM: loading" in kernel and b"udevd" not in kernel
    assert b"== /usr/lib/modules/6.12.43-talos/extras/nvidia.ko ==" in files["modules/modinfo.txt"]
    assert b"version:        535.309.01" in files["modules/modinfo.txt"]
    readme = files["README.txt"].decode()
    assert "run/nvidia-driver.state  <- " in readme and "[absent]" in readme


def test_the_size_cap_holds_and_cut_members_say_so(tmp_path: Path) -> None:
    paths = report_host(tmp_path)
    paths.run_dir.mkdir()
    (paths.run_dir / "nvidia-driver.log").write_bytes(b"an init log line\n" * 20000)  # 340 KB
    files = unpack(collect_report(paths, ReportOptions(total_cap=64 << 10, run_bug_script=False), _status, {}))
    index = index_of(files)
    collected = sum(len(v) for k, v in files.items() if k not in ("index.json", "README.txt"))
    assert collected <= 64 << 10
    log = index["run/nvidia-driver.log"]
    assert log["included"] and "truncated at" in log["note"]


def test_the_deadline_holds_when_a_step_hangs(tmp_path: Path) -> None:
    """status' inspection stuck on a host read: its child is killed at the deadline, the rest is written."""
    paths = report_host(tmp_path)

    def stuck() -> str:
        time.sleep(600)
        return STATUS

    started = time.monotonic()
    files = unpack(collect_report(paths, ReportOptions(deadline_s=1.5), stuck, {}))
    assert time.monotonic() - started < 10
    index = index_of(files)
    assert not index["status.json"]["included"]
    assert index["status.json"]["note"].startswith("timed out after")
    assert "host/os-release" in files  # later steps still report (those not needing time)


def test_a_failing_step_is_a_note(tmp_path: Path) -> None:
    paths = report_host(tmp_path)

    def broken() -> str:
        raise HostReadError("/proc/modules: cannot read: Input/output error")

    index = index_of(unpack(collect_report(paths, ReportOptions(run_bug_script=False), broken, {})))
    assert index["status.json"]["note"] == "failed: /proc/modules: cannot read: Input/output error"


def test_the_allow_list_is_every_name_settings_reads() -> None:
    """Read back from Settings.from_env itself (and the pod's name, which its Cluster reads): a knob added
    there is allowed without another list."""
    literal = set(re.findall(r'"([A-Z][A-Z0-9_]+)"', inspect.getsource(Settings.from_env)))
    assert set(settings_env_names()) == literal | {"POD_NAME", "HOSTNAME"}


def test_the_environment_member_itself_holds_no_secret_value() -> None:
    """Before the archive's redaction pass: only allow-listed names, and a secret-looking one masked."""
    env = {"HOST_ROOT_MOUNT": "/host", "NVFM_CONFIG_TOKEN": "t0ken", "MY_PASSWORD": "pw", "PATH": "/usr/bin"}
    member = environment_member(env)
    assert member.data is not None
    assert json.loads(member.data)["environment"] == {"HOST_ROOT_MOUNT": "/host", "NVFM_CONFIG_TOKEN": "<redacted>"}
