"""Counting tokens as the server does: a local tokenizer when the run has one (``engine.tokenizer``, or a
plugin's ``local_tokenizer`` hook), else its tokenize endpoint (``EngineTraits.tokenize``), else its own
``usage.prompt_tokens``."""

from __future__ import annotations

from pathlib import Path

import httpx

from infermatrix.core.config import ConfigError
from infermatrix.core.engine.traits import TokenizeAPI
from infermatrix.core.engine.stale import send_again_if_stale

__all__ = ["ServerTokenizer", "UsageTokenizer", "FileTokenizer", "tokenizer_json", "pick_tokenizer"]


# Counts of generated text kept per run (text -> tokens): greedy decoding repeats the same output for the
# same prompt restart after restart, and each cell's reconciliation counts every request's text.
OUTPUT_CACHE_ENTRIES = 4096


class ServerTokenizer:
    """The engine's tokenize endpoint, as its traits describe it. For the chat API the template is applied.

    Generated text is counted once per distinct text (``count_output`` is cached): a count is a function
    of the text, and a request to the engine's API server is not free (it serves the streams too)."""

    exact = True

    def __init__(self, client: httpx.AsyncClient, base_url: str, model: str, api: str, headers: dict[str, str],
                 spec: TokenizeAPI | None = None):  # fmt: skip
        self.client, self.base_url, self.model, self.api, self.headers = client, base_url, model, api, headers
        self.spec = spec or TokenizeAPI()
        self.source = f"server {self.spec.path}"
        self.calls = 0
        self._outputs: dict[str, int] = {}

    def _body(self, text: str) -> dict:
        if self.api == "chat":
            return self.spec.chat_body(self.model, text)
        return self.spec.text_body(self.model, text)

    async def count(self, text: str) -> int:
        return await self._post(self._body(text))

    async def count_output(self, text: str) -> int:
        """Tokens of generated text: no chat template, no special tokens."""
        if not text:
            return 0
        known = self._outputs.get(text)
        if known is not None:
            return known
        n = await self._post(self.spec.text_body(self.model, text, special_tokens=False))
        if len(self._outputs) >= OUTPUT_CACHE_ENTRIES:
            self._outputs.pop(next(iter(self._outputs)))  # the oldest: a run's outputs repeat within a cell
        self._outputs[text] = n
        return n

    async def _post(self, body: dict) -> int:
        self.calls += 1
        # The client's timeouts (matrix.idle_timeout_s for the answer): a stalled tokenizer is an engine that stopped answering.
        # A pooled connection the server closed under it (right after a cell's streams were closed, say): asked again.
        r = await send_again_if_stale(lambda: self.client.post(f"{self.base_url}{self.spec.path}", json=body, headers=self.headers))
        r.raise_for_status()
        return self.spec.read_count(r.json())


class UsageTokenizer:
    """Calibrate on the server's own count: a ``max_tokens = 1`` request and its ``usage.prompt_tokens``.

    Costs a real prefill per call, so it is the fallback for servers without a tokenize endpoint.
    ``count_output`` is the tokenize endpoint's when there is one (chat servers whose endpoint
    can't apply the chat template), else ``None``: generated text can't be counted.
    """

    exact = True
    source = "server usage.prompt_tokens"

    def __init__(self, client: httpx.AsyncClient, base_url: str, model: str, api: str, headers: dict[str, str],
                 output_counter: ServerTokenizer | None = None):  # fmt: skip
        self.client, self.base_url, self.model, self.api, self.headers = client, base_url, model, api, headers
        self.count_output = output_counter.count_output if output_counter is not None else None
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
        # One token to prefill: a request a closed pooled connection never delivered is sent again (engine/stale.py).
        r = await send_again_if_stale(lambda: self.client.post(f"{self.base_url}{path}", json=body, headers=self.headers, timeout=600))
        r.raise_for_status()
        return int(r.json()["usage"]["prompt_tokens"])


def tokenizer_json(path: str) -> Path:
    """The tokenizer.json ``path`` names (the file, or a model directory holding one); ConfigError when none."""
    p = Path(path).expanduser()
    file = p / "tokenizer.json" if p.is_dir() else p
    if not file.is_file():
        raise ConfigError(f"engine.tokenizer: no tokenizer.json at {path}")
    return file


class FileTokenizer:
    """A model's ``tokenizer.json``, read with the ``tokenizers`` package: prompts are sized here, with no
    request to the engine (for servers without a tokenize endpoint; ``engine.tokenizer``).

    For the chat API the model's chat template adds tokens around the prompt; a tokenizer.json does not hold
    the template, so that overhead is measured once (``calibrate_chat``: one ``max_tokens = 1`` request, its
    ``usage.prompt_tokens`` less the local count) and added to every count."""

    exact = True

    def __init__(self, path: str, api: str = "completions"):
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise ConfigError("engine.tokenizer needs the `tokenizers` package: pip install 'infermatrix[tokenizer]'") from None
        file = tokenizer_json(path)
        try:
            self._tok = Tokenizer.from_file(str(file))
        except Exception as exc:  # the library raises its own Exception subclass for a bad file
            raise ConfigError(f"engine.tokenizer: {file} is not a tokenizer.json the `tokenizers` package reads: {exc}") from None
        self.api = api
        self.source = f"local {file}"
        self.chat_overhead = 0

    def tokens(self, text: str, special: bool = True) -> int:
        return len(self._tok.encode(text, add_special_tokens=special).ids)

    async def count(self, text: str) -> int:
        return self.tokens(text) + (self.chat_overhead if self.api == "chat" else 0)

    async def count_output(self, text: str) -> int:
        """Tokens of generated text: no template, no special tokens."""
        return self.tokens(text, special=False) if text else 0

    async def calibrate_chat(self, usage: UsageTokenizer) -> None:
        probe = "hello world"
        self.chat_overhead = max(0, await usage.count(probe) - self.tokens(probe))


_DEFAULT_TOKENIZE = TokenizeAPI()  # frozen: one shared default is safe


async def pick_tokenizer(
    client: httpx.AsyncClient, base_url: str, model: str, api: str, headers: dict[str, str],
    spec: TokenizeAPI | None = _DEFAULT_TOKENIZE,
) -> ServerTokenizer | UsageTokenizer:
    """The engine's tokenize endpoint (``spec``) when it answers sensibly, else usage calibration."""
    if spec is None:
        return UsageTokenizer(client, base_url, model, api, headers)
    tok = ServerTokenizer(client, base_url, model, api, headers, spec)
    try:
        if api == "chat" and not spec.chat:  # it can't apply the chat template, but can count generated text
            if await tok.count_output("hello world") > 0:
                return UsageTokenizer(client, base_url, model, api, headers, output_counter=tok)
        elif await tok.count("hello world") > 0:
            return tok
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code >= 500:  # a failing server, not a missing endpoint: not a reason to count otherwise
            raise
    except httpx.TransportError:
        raise  # the engine went away: the caller finds out whether it is down, and asks again
    except (httpx.HTTPError, KeyError, ValueError, TypeError):
        pass
    return UsageTokenizer(client, base_url, model, api, headers)
