"""One TLS context per process for every HTTP client lash makes.

httpx builds a fresh context for each client, loading the CA bundle into it: about 30 ms of CPU.
lash makes a client per request where requests are rare and may come from any thread or event
loop (the admin API, a first open's lookup of a call target, the test kit's calls and polls), so
that cost was paid per request. One context, built at first use as httpx builds it (honouring
``SSL_CERT_FILE`` and ``SSL_CERT_DIR``), serves them all: an `ssl.SSLContext` is safe to share.
"""

from __future__ import annotations

import ssl
from functools import cache

import httpx

__all__ = ["tls"]


@cache
def tls() -> ssl.SSLContext:
    """The process's TLS context for httpx clients: pass it as ``verify=``."""
    return httpx.create_ssl_context()
