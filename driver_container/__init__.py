"""NVIDIA driver-container entrypoint for Talos Linux."""

__version__ = "0.1.0"
