"""matrix.transport = "auto": the raw reader for plain http(s) endpoints, httpx where the raw one would not send the
request the way the rest of the run does (stream/transport_choice.py, docs/performance.md)."""

import pytest

from infermatrix.core.config import MatrixConfig
from infermatrix.core.stream.transport_choice import choose_transport


def test_auto_is_the_default():
    assert MatrixConfig().transport == "auto"


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "https://engine.example:443", "http://gpu-box"])
def test_plain_endpoints_get_the_raw_reader(url):
    c = choose_transport("auto", url, env={})
    assert c.used == "raw" and "plain" in c.why and c.setting == "auto"


@pytest.mark.parametrize(("env", "url", "used"), [
    ({"HTTP_PROXY": "http://proxy:3128"}, "http://engine:8000", "httpx"),
    ({"https_proxy": "http://proxy:3128"}, "https://engine:8000", "httpx"),
    ({"https_proxy": "http://proxy:3128"}, "http://engine:8000", "raw"),  # a proxy for the other scheme only
    ({"ALL_PROXY": "socks5://proxy:1080"}, "http://engine:8000", "httpx"),
    ({"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "localhost,.internal"}, "http://gpu.internal:8000", "raw"),
    ({"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "*"}, "http://engine:8000", "raw"),
    ({"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "other"}, "http://engine:8000", "httpx"),
])  # fmt: skip
def test_a_proxy_for_the_host_needs_httpx(env, url, used):
    c = choose_transport("auto", url, env=env)
    assert c.used == used, c
    if used == "httpx":
        assert "PROXY is set" in c.why


def test_credentials_in_the_url_and_other_schemes_need_httpx():
    assert choose_transport("auto", "http://user:secret@engine:8000", env={}).used == "httpx"
    c = choose_transport("auto", "unix:///run/engine.sock", env={})
    assert c.used == "httpx" and "unix" in c.why


def test_an_explicit_setting_is_kept():
    assert choose_transport("httpx", "http://127.0.0.1:8000", env={}).as_dict() == {"used": "httpx", "why": "set by matrix.transport", "setting": "httpx"}
    assert choose_transport("raw", "http://127.0.0.1:8000", env={"HTTP_PROXY": "http://p:1"}).used == "raw"
