"""Counting tokens as the server does: its ``/tokenize`` endpoint, else its own ``usage.prompt_tokens``."""

from __future__ import annotations

import httpx

__all__ = ["ServerTokenizer", "UsageTokenizer", "pick_tokenizer"]


class ServerTokenizer:
    """``POST /tokenize`` (vLLM, SGLang and the sim have it). For the chat API the template is applied."""

    exact = True
    source = "server /tokenize"

    def __init__(self, client: httpx.AsyncClient, base_url: str, model: str, api: str, headers: dict[str, str]):
        self.client, self.base_url, self.model, self.api, self.headers = client, base_url, model, api, headers
        self.calls = 0

    def _body(self, text: str) -> dict:
        if self.api == "chat":
            return {"model": self.model, "messages": [{"role": "user", "content": text}], "add_generation_prompt": True}
        return {"model": self.model, "prompt": text}

    async def count(self, text: str) -> int:
        return await self._post(self._body(text))

    async def count_output(self, text: str) -> int:
        """Tokens of generated text: no chat template, no special tokens."""
        if not text:
            return 0
        return await self._post({"model": self.model, "prompt": text, "add_special_tokens": False})

    async def _post(self, body: dict) -> int:
        self.calls += 1
        r = await self.client.post(f"{self.base_url}/tokenize", json=body, headers=self.headers, timeout=60)
        r.raise_for_status()
        data = r.json()
        if "count" in data:
            return int(data["count"])
        return len(data["tokens"])


class UsageTokenizer:
    """Calibrate on the server's own count: a ``max_tokens = 1`` request and its ``usage.prompt_tokens``.

    Costs a real prefill per call, so it is the fallback for servers without ``/tokenize``.
    """

    exact = True
    source = "server usage.prompt_tokens"
    count_output = None  # no way to count generated text without /tokenize

    def __init__(self, client: httpx.AsyncClient, base_url: str, model: str, api: str, headers: dict[str, str]):
        self.client, self.base_url, self.model, self.api, self.headers = client, base_url, model, api, headers
        self.calls = 0

    async def count(self, text: str) -> int:
        self.calls += 1
        body: dict = {"model": self.model, "max_tokens": 1, "temperature": 0.0}
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": text}]
            path = "/v1/chat/completions"
        else:
            body["prompt"] = text
            path = "/v1/completions"
        r = await self.client.post(f"{self.base_url}{path}", json=body, headers=self.headers, timeout=600)
        r.raise_for_status()
        return int(r.json()["usage"]["prompt_tokens"])


async def pick_tokenizer(
    client: httpx.AsyncClient, base_url: str, model: str, api: str, headers: dict[str, str]
) -> ServerTokenizer | UsageTokenizer:
    """The server's ``/tokenize`` when it answers sensibly, else usage calibration."""
    tok = ServerTokenizer(client, base_url, model, api, headers)
    try:
        if await tok.count("hello world") > 0:
            return tok
    except (httpx.HTTPError, KeyError, ValueError, TypeError):
        pass
    return UsageTokenizer(client, base_url, model, api, headers)
