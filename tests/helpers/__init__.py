"""Shared test helpers, imported as ``helpers.<module>``: pyproject's pytest ``pythonpath = ["tests"]``
puts tests/ on sys.path, and no conftest or test changes sys.path.

- ``support``: repository, fixture and artefact paths; ``require``/``require_module`` (a skip locally, a
  failure under CI=true); ``fixture_paths`` (HostPaths of a fixture tree).
- ``fakes``: fake modprobe/rmmod/modinfo acting on a fixture copy, recording module tools, the fake
  daemons' environment; ``fake_persistenced.py``, ``fake_fabric.py``, ``fake_nvidia_smi.py`` are the fake
  programs themselves (copied onto PATH as scripts, never imported).
- ``hostenv``: ``Host``, a disposable fixture host plus image userspace with ``nvidia-driver`` run on it as
  a process (``make_host``).
- ``trees``: ``snapshot``, the one tree snapshot (mode, content, link counts, mtimes, inodes as asked).
- ``rootcmp``: two published driver roots compared; what a killed publish may leave.
- ``gpuswap``: the 595 fixture host with its H100 swapped for another GPU (``swap_h100``), and the image's
  supported-gpus.json put in place (``put_gpu_list``).
- ``waits``: ``wait_until``, the bounded poll. ``opened``: the files a block (or a child) opens.
- ``nvidia_sandbox``: NVIDIA's real binaries in a private mount namespace with a throw-away /dev.
- ``toolkit``: NVIDIA's real container toolkit (nvidia-ctk, nvidia-container-runtime) reading a root, and the
  comparison of what it gives a container from two roots.
- ``operator_render``: NVIDIA's gpu-operator v26.7.0 rendering its driver DaemonSets (``render-driver``),
  Talos nodes as NFD labels them, the chart's ClusterPolicy from a values file.
- ``published_roots``: every real userspace the suite publishes, and its publish by ``init --no-wait``.
- ``imex``: stand-in nvidia-imex/nvidia-imex-ctl (Debian ships none) in a copy of a real userspace.
- ``mps``: the MPS control daemon as NVIDIA's DRA driver and the device plugin run it from a driver root,
  in a private PID and mount namespace.
- ``procsys``: ``init --no-wait`` on a Talos-like /run in a PID and mount namespace of its own (its tmpfs,
  procfs and sysfs in the root), then the DRA driver's MPS flow in that PID namespace, as hostPID pods.
- ``mounts``: real mounts for the duration of a test: a tmpfs with Talos's /run flags, a procfs or sysfs.
- ``operator_validator``: gpu-operator v26.7.0's driver startup probe and its real ``nvidia-validator --component
  driver`` against a driver root, each in a root of its own in a private mount namespace, with a stand-in
  nvidia-smi, a test-chosen /proc/modules and a stand-in Kubernetes API (https on 127.0.0.1).
- ``fuzz_targets``, ``fuzz_mutate``: every untrusted-input parser with its samples, and the mutation
  strategy (the property tests and bench/fuzz.py).
- ``bench``: bench/ scripts loaded from their files for the tests of their parsers.
- ``elfbuild``: tiny module-like ELF files of any class and byte order. ``talos``: a Talos fixture host as
  another Talos release shows it.

A helper used by one directory's tests only stays beside them (e.g. tests/container/container_support.py,
tests/unit/manager/manager_support.py): pytest's default import mode puts a test's own directory on sys.path.
"""
