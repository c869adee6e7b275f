"""The one HTTP stack's smallest use: a readiness probe, for the launcher (which comes before the
measurement stage and so does not import its client). Standard library only, like the client."""

from __future__ import annotations

import http.client
from urllib.parse import urlsplit


def probe(base_url: str, path: str, timeout: float) -> bool:
    """True when GET `path` answers 200; any failure to connect or to answer is False (not ready yet)."""
    parts = urlsplit(base_url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    try:
        conn = cls(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
        try:
            conn.request("GET", parts.path.rstrip("/") + path)
            return conn.getresponse().status == 200
        finally:
            conn.close()
    except (OSError, http.client.HTTPException):
        return False
