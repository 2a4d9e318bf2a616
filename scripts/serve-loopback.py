#!/usr/bin/env python3
"""Serve one directory over HTTP on 127.0.0.1 (an ephemeral port, printed first) until killed.

scripts/setup.sh feeds the Dockerfile's archive route (curl inside a `--network host` build) a driver archive
made here, the way a release build downloads NVIDIA's from its server. Read-only, loopback only.

Usage: serve-loopback.py DIR
"""

from __future__ import annotations

import functools
import http.server
import sys


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=argv[0])
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        print(server.server_address[1], flush=True)
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
