"""Which reader streams a cell's responses: ``matrix.transport`` = ``auto`` (default), ``raw`` or ``httpx``.

Why ``auto`` picks the raw reader: at 128–256 streams on a few shared cores the httpx path reads chunks
seconds after they were sent (one trip through httpcore, h11 and an async iterator per network read), while
the raw reader keeps up (docs/performance.md). It picks httpx wherever the raw reader would not send the
request the way the rest of the run does:

* a proxy is set in the environment for the server's host (httpx honours ``HTTP_PROXY``, ``HTTPS_PROXY``,
  ``ALL_PROXY`` and ``NO_PROXY``; the raw reader connects directly),
* the URL carries credentials (``user:pass@host``: httpx sends them as basic auth; the raw reader does not),
* a scheme other than ``http`` / ``https``.

``https`` is served by the raw reader with httpx's own TLS settings (``httpx.create_ssl_context``), so
certificates are checked against the same store. The choice and its reason are stored per cell
(``cells.flags.transport``) and printed in the run header.
"""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass
from typing import Mapping
from urllib.parse import urlsplit

__all__ = ["TransportChoice", "choose_transport"]

_PROXY_KEYS = ("all",)  # besides the URL's own scheme


@dataclass(frozen=True)
class TransportChoice:
    used: str  # raw | httpx
    why: str
    setting: str  # what matrix.transport said: auto | raw | httpx

    def as_dict(self) -> dict[str, str]:
        return {"used": self.used, "why": self.why, "setting": self.setting}

    def line(self) -> str:
        return f"{self.used} ({self.why})"


def _proxied(scheme: str, host: str, env: Mapping[str, str] | None) -> str | None:
    """The proxy variable that applies to ``host`` (NO_PROXY honoured), or None."""
    proxies = urllib.request.getproxies_environment() if env is None else {
        k[:-6].lower(): v for k, v in env.items() if k.lower().endswith("_proxy") and v
    }  # fmt: skip
    for key in (scheme, *_PROXY_KEYS):
        if proxies.get(key):
            no_proxy = proxies.get("no")
            if no_proxy and _bypassed(host, no_proxy):
                return None
            return f"{key.upper()}_PROXY"
    return None


def _bypassed(host: str, no_proxy: str) -> bool:
    """NO_PROXY as httpx reads it: ``*``, or a host / domain suffix in the comma-separated list."""
    host = host.lower()
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        entry = entry.split("://", 1)[-1].rsplit(":", 1)[0] if not entry.startswith("[") else entry
        if host == entry.lstrip(".") or host.endswith("." + entry.lstrip(".")):
            return True
    return False


def choose_transport(setting: str, base_url: str, env: Mapping[str, str] | None = None) -> TransportChoice:
    """The reader for streams to ``base_url`` under ``matrix.transport = setting`` (``env``: the environment
    to read proxy variables from; None: this process's)."""
    if setting != "auto":
        return TransportChoice(setting, "set by matrix.transport", setting)
    u = urlsplit(base_url)
    scheme = (u.scheme or "").lower()
    if scheme not in ("http", "https"):
        return TransportChoice("httpx", f"auto: the raw reader speaks http and https, not {scheme or 'this URL'}", setting)
    if u.username or u.password:
        return TransportChoice("httpx", "auto: the URL carries credentials, which httpx sends as basic auth", setting)
    proxy = _proxied(scheme, u.hostname or "", env)
    if proxy is not None:
        return TransportChoice("httpx", f"auto: {proxy} is set for {u.hostname}; httpx goes through it, the raw reader would not", setting)
    return TransportChoice("raw", f"auto: a plain {scheme}:// HTTP/1.1 endpoint, no proxy", setting)
