"""Parsers and readers of kernel state: /proc/modules, /sys/module, /proc/driver/nvidia, /proc/devices."""
