"""Concurrent init, status and driver-manager on one RUN_DIR, and host files changing while init verifies.

Concurrency: every init either publishes or refuses with "already running"; nothing crashes; the root
left behind is exactly a clean publish. driver-manager talks to a local fake API server and reads the
real /proc, so it gets as far as its pid-file clean-up (it must never remove the pid file of a live
init) and exits 0. Changing host: /proc and /sys flip between the healthy 595 host and a 580 host
(atomic symlink swaps every few ms); init must exit 0 with the clean 595 root or exit 1 with the one-line
error that names the 580 module it saw (the same answer as on the pinned 580 host), never crash or
publish a mixed root.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from helpers.hostenv import HOSTS, Host, make_host
from helpers.rootcmp import leftovers, root_state
from helpers.tls import self_signed, serve_tls

MANAGER = "import sys; from driver_container.cli.manager_cmd import main; main(sys.argv[1:])"
NODE = {"kind": "Node", "metadata": {"name": "node-1", "labels": {}}}


class _NodeApi(BaseHTTPRequestHandler):
    """Just enough of the API server for uninstall_driver on a node without operand pods."""

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = json.dumps({"kind": "PodList", "items": []} if "/pods" in self.path else NODE).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PATCH = _answer  # noqa: N815

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[Path]:
    cert, key = self_signed(tmp_path, "api")
    httpd = serve_tls(ThreadingHTTPServer(("127.0.0.1", 0), _NodeApi), cert, key)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    path = tmp_path / "kubeconfig.json"
    server = {"server": f"https://127.0.0.1:{httpd.server_address[1]}", "certificate-authority": str(cert)}
    path.write_text(
        json.dumps(
            {
                "clusters": [{"name": "c", "cluster": server}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "current-context": "x",
            }
        )
    )
    yield path
    httpd.shutdown()
    thread.join()


def _clean_state(h: Host) -> tuple[object, object]:
    done = h.run("init", "--no-wait", RUN_DIR=str(h.base / "clean-run"))
    assert done.returncode == 0, done.stderr
    return root_state(h.base / "clean-run/driver")


@pytest.mark.timeout(600)  # 3 rounds of 6 processes, each bounded at 120 s
def test_concurrent_init_status_and_driver_manager(tmp_path: Path, kubeconfig: Path) -> None:
    h = make_host(tmp_path / "h")
    expected = _clean_state(h)
    # The real /proc: pids of the running inits are visible, as with hostPID in the pod.
    manager_env = {**h.env, "NODE_NAME": "node-1", "KUBECONFIG": str(kubeconfig), "PROCFS_ROOT": "/proc"}
    for round_ in range(3):
        procs = [h.start("init", "--no-wait") for _ in range(3)] + [h.start("status") for _ in range(2)]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", MANAGER, "uninstall_driver"],
                env=manager_env,
                cwd=h.base,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
        results = [(p, *p.communicate(timeout=120)) for p in procs]
        for proc, out, err in results:
            assert "Traceback" not in out + err, f"round {round_}, {proc.args!r}:\n{err}"
        inits = results[:3]
        ok = [r for r in inits if r[0].returncode == 0]
        for proc, _out, err in inits:
            assert proc.returncode == 0 or "already running" in err, f"round {round_}: {err}"
        assert ok, f"round {round_}: no init published"
        for proc, _out, _err in results[3:5]:
            assert proc.returncode in (0, 1), proc.args
        manager, out, err = results[5]
        # It reached the end of uninstall_driver, past the pid-file check and clean-up it races with.
        assert manager.returncode == 0, err
        assert re.search(r"^driver-manager: Talos .*(nothing to clean|removed stale)", out, re.M), out
    assert not (h.run_dir / "nvidia-driver.pid").exists()
    assert root_state(h.driver_root) == expected
    assert leftovers(h.driver_root) == []


def _flipper(links: list[tuple[Path, Path, Path]], stop: threading.Event) -> None:
    flip = False
    while not stop.is_set():
        flip = not flip
        for link, a, b in links:
            tmp = link.with_name(link.name + ".new")
            tmp.symlink_to(b if flip else a)
            os.replace(tmp, link)  # rename(2): readers see the old or the new tree, never none
        time.sleep(0.003)


# The one-line error of init on the 580 host: the loaded module's version is named.
ERROR_580 = re.compile(r"^nvidia-driver: error: .*580\.178\.04", re.M)


def _pin(links: list[tuple[Path, Path, Path]], which: int) -> None:
    for link, *targets in links:
        tmp = link.with_name(link.name + ".new")
        tmp.symlink_to(targets[which])
        os.replace(tmp, link)


@pytest.mark.timeout(600)  # 10 inits, each bounded at 120 s
def test_host_files_changing_during_verification(tmp_path: Path) -> None:
    h = make_host(tmp_path / "h")
    expected = _clean_state(h)
    other = tmp_path / "580"
    shutil.copytree(HOSTS / "talos-1.13-lts-580-vs-595", other, symlinks=True)
    links = []
    for kind in ("proc", "sys"):
        real = h.root / kind
        os.rename(real, h.root / f"{kind}-595")
        (h.root / kind).symlink_to(h.root / f"{kind}-595")
        links.append((h.root / kind, h.root / f"{kind}-595", other / kind))
    # The two stable answers the flipping runs must match: 580 pinned fails naming 580, 595 publishes.
    _pin(links, 1)
    pinned = h.run("init", "--no-wait", timeout=120)
    assert pinned.returncode == 1 and ERROR_580.search(pinned.stderr), pinned.stderr
    _pin(links, 0)
    stop = threading.Event()
    thread = threading.Thread(target=_flipper, args=(links, stop), daemon=True)
    thread.start()
    try:
        for attempt in range(8):
            done = h.run("init", "--no-wait", timeout=120)
            assert "Traceback" not in done.stderr, done.stderr
            assert done.returncode in (0, 1), done.stderr
            if done.returncode == 1:
                assert ERROR_580.search(done.stderr), f"attempt {attempt}: not the 580 answer:\n{done.stderr}"
            else:
                assert root_state(h.driver_root) == expected, f"attempt {attempt}: mixed root"
    finally:
        stop.set()
        thread.join()
    assert not (h.run_dir / "nvidia-driver.pid").exists()
