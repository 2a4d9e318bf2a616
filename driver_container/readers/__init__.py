"""Readers: one host file or directory (sysfs, procfs, a module file, an ELF file) into a record of formats/.

The I/O half of formats/: each reader opens through ``Root`` (resolver.py) or the one bounded read helper and
hands the bytes to formats/' pure decoders. Used by the reading room (inspect) and the writing rooms (publish,
node) alike, so it sits below both.
"""
