"""modprobe / refcount-safe rmmod on generic (non-Talos) hosts; never used on Talos."""
