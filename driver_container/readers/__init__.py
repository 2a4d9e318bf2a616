"""Readers: the host reads that more than the host's state needs (docs/architecture.md, "Reading").

One host object (a module file, an ELF file, /proc/driver/nvidia, the fabric's files) into a record of
formats/: each reader opens through ``Root`` (base/resolver.py) or the one bounded read helper and hands the
bytes to formats/' pure decoders. Each is used by a room besides inspect (publish, node, lifecycle, the
CLI, report), so it sits below all of them; a read only the host's state needs lives in inspect/.
"""
