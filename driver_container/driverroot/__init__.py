"""The published root (DRIVER_ROOT): its mount, /proc and /sys, proof of use, manifest, journal,
digest index, integrity check, publish status and toolkit features. Read and written by the rooms above."""
