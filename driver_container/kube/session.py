"""The requests session and adapter of the API client: no redirect, one TLS context, sockets the
request's watchdog can shut down (transport.py).

No redirect: requests reads (and decompresses, whole) the body of a 3xx in ``resolve_redirects``
(``resp.content``), and runs it even with ``allow_redirects=False``, to fill ``Response.next``
(psf/requests issue 4123, requests/sessions.py ``Session.send``). ``ApiSession`` finds no redirect target,
so that code never starts.

One TLS context: ``DeadlineAdapter`` puts the ``ssl.SSLContext`` it is given (tlscontext.py) on every pool
and drops requests' ``verify`` and ``cert``: those are file names, which OpenSSL would open, blocking, for
every new connection (a FIFO there held the call for ever).
"""

from __future__ import annotations

import socket
import ssl
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from driver_container.kube.transport import register_socket


class _Registering(HTTPConnection):
    """A connection whose socket the active watchdog can shut down."""

    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        register_socket(sock)  # before the TLS handshake: a dribbled handshake is cut off too
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        register_socket(self.sock)  # a connection reused from the pool
        super().request(*args, **kwargs)


class _Connection(_Registering):
    pass


class _TlsConnection(_Registering, HTTPSConnection):
    pass


class _Pool(HTTPConnectionPool):
    ConnectionCls = _Connection


class _TlsPool(HTTPSConnectionPool):
    ConnectionCls = _TlsConnection


_POOLS: dict[str, type[HTTPConnectionPool]] = {"http": _Pool, "https": _TlsPool}


class ApiSession(requests.Session):
    """A session that never sees a redirect: ``resolve_redirects`` loops while this returns a target."""

    def get_redirect_target(self, resp: requests.Response) -> str | None:
        return None


class DeadlineAdapter(HTTPAdapter):
    """requests' adapter with pools whose connections register their sockets with the active watchdog,
    and whose TLS is ``ssl_context`` alone."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None, **kwargs: Any) -> None:
        self._ssl_context = ssl_context
        super().__init__(**kwargs)

    def build_connection_pool_key_attributes(
        self, request: requests.PreparedRequest, verify: Any, cert: Any = None
    ) -> Any:
        # The pool key's TLS part is this context alone; cert_reqs None: urllib3 takes the context's mode.
        host, _ = super().build_connection_pool_key_attributes(request, True, None)
        return host, {"ssl_context": self._ssl_context, "cert_reqs": None}

    def cert_verify(self, conn: Any, url: str, verify: Any, cert: Any) -> None:
        # requests' version puts CA and key file names on the pool, for OpenSSL to open: none here.
        conn.ca_certs = conn.ca_cert_dir = conn.cert_file = conn.key_file = None

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _POOLS

    def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **kwargs)
        manager.pool_classes_by_scheme = _POOLS
        return manager
