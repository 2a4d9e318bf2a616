"""Every test of the suite runs under the machine guard (helpers/machine_guard.py): a test that writes
outside its temporary directories (RUN_DIR, DRIVER_ROOT, sysfs parameters of the machine running it)
fails, naming the path and how it was written."""

pytest_plugins = ("helpers.machine_guard",)
