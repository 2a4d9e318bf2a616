"""Publish the image's userspace into DRIVER_ROOT: scan -> plan -> apply/journal -> cache_check -> manifest.

The entry point is ``publisher.publish_driver_root``. This package file imports nothing: ``status``
and ``init``'s module wait read ``publish.status`` (manifest, journal, last failure) and must not pay
for the copier, the ELF reader and the planner (bench/startup.py).
"""
