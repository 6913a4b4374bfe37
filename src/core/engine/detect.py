"""``engine.kind = "auto"``: find which engine serves a URL, by asking each engine class's recogniser.

Every engine class may implement ``recognise(probe)`` (a classmethod, see ``Engine``): it looks at the
server through a :class:`ServerProbe`, which GETs each path at most once, with short timeouts and an
overall deadline, and shares the answers between recognisers. Recognisers are asked in a documented
order (``Engine.recognise_order``, then kind name) and the first that says yes wins. A server no one
recognises is attached as the plain OpenAI kind (docs/engines.md, "Which kind reads what").

Nothing here names an engine vendor: what identifies an engine lives in its plugin.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

# AUTO_KIND and AutoEngineConfig live in core/config/ (below the registry, which adds the arm); imported here for callers.
from infermatrix.core.config import AUTO_KIND, AutoEngineConfig, ConfigError

if TYPE_CHECKING:
    import pluggy

    from infermatrix.core.config import RunConfig

__all__ = [
    "AUTO_KIND", "FALLBACK_KIND", "AutoEngineConfig", "ProbeAnswer", "ServerProbe", "Recognition", "Detection",
    "detect_engine", "resolve_auto", "metric_prefixes",
]

# What a server nobody recognises is attached as: the kind that asks only for the OpenAI API itself.
# A kind name, not a vendor: the OpenAI API is what every attached server speaks.
FALLBACK_KIND = "openai"
NONE_FOUND = "no known engine recognised at {url}; using plain OpenAI (no capacity, no engine metrics)"

# Bounds on the probe: a recogniser asks a handful of GETs of a server that may not have the paths at all.
GET_TIMEOUT_S = 2.0  # one GET (a 404 on loopback takes a millisecond)
DEADLINE_S = 8.0  # all of them together; a path not asked by then counts as not answered
MAX_BODY = 4 << 20  # a /metrics page is ~50 KB; more than this is not read


@dataclass(frozen=True)
class ProbeAnswer:
    """One GET's answer: its status and body (``json`` is ``None`` when the body is not JSON)."""

    status: int
    text: str
    json: Any = None


@dataclass(frozen=True)
class Recognition:
    """A recogniser's yes: ``evidence`` says what showed it, in a few words ("/version + the engine's metric names")."""

    evidence: str
    detail: dict[str, Any] = field(default_factory=dict)


class ServerProbe:
    """The server at ``base_url`` as recognisers see it: each path asked once, answers shared.

    ``get`` returns ``None`` for a path that did not answer (refused, timed out, past the deadline);
    ``json`` and ``text`` return a 200 answer's body (``None`` otherwise). Only GETs: recognising a
    server must change nothing on it.
    """

    def __init__(self, client: httpx.AsyncClient, base_url: str, headers: dict[str, str] | None = None,
                 *, get_timeout_s: float = GET_TIMEOUT_S, deadline_s: float = DEADLINE_S):  # fmt: skip
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.headers = headers or {}
        self.get_timeout_s = get_timeout_s
        self.deadline = time.monotonic() + deadline_s
        self.answers: dict[str, ProbeAnswer | None] = {}

    async def get(self, path: str) -> ProbeAnswer | None:
        if path in self.answers:
            return self.answers[path]
        answer: ProbeAnswer | None = None
        left = self.deadline - time.monotonic()
        if left > 0:
            try:
                r = await self.client.get(f"{self.base_url}{path}", headers=self.headers, timeout=min(self.get_timeout_s, left))
                text = r.text[:MAX_BODY]
                try:
                    data = json.loads(text) if text.lstrip()[:1] in ("{", "[", '"') else None
                except ValueError:
                    data = None
                answer = ProbeAnswer(r.status_code, text, data)
            except httpx.HTTPError:
                answer = None
        self.answers[path] = answer
        return answer

    async def json(self, path: str) -> Any:
        a = await self.get(path)
        return a.json if a is not None and a.status == 200 else None

    async def text(self, path: str) -> str | None:
        a = await self.get(path)
        return a.text if a is not None and a.status == 200 else None

    async def has_metrics(self, prefix: str, path: str = "/metrics") -> bool:
        """Whether the Prometheus page at ``path`` has a sample whose name starts with ``prefix``."""
        return prefix in metric_prefixes(await self.text(path) or "", (prefix,))

    async def owned_by(self) -> set[str]:
        """The ``owned_by`` of every model ``/v1/models`` lists (engines put their own name there)."""
        data = await self.json("/v1/models")
        entries = data.get("data") if isinstance(data, dict) else None
        return {str(m.get("owned_by")) for m in entries or [] if isinstance(m, dict) and m.get("owned_by")}


def metric_prefixes(page: str, prefixes: tuple[str, ...]) -> set[str]:
    """Which of ``prefixes`` begin a sample line of a Prometheus text ``page`` (comments skipped)."""
    found: set[str] = set()
    for line in page.splitlines():
        if line and not line.startswith("#"):
            found.update(p for p in prefixes if line.startswith(p))
            if len(found) == len(prefixes):
                break
    return found


@dataclass
class Detection:
    """What ``auto`` found: the kind (``FALLBACK_KIND`` when none), why, and what it cost."""

    kind: str
    evidence: str | None  # None: nobody recognised the server
    url: str
    ms: float
    asked: list[str]  # the paths GET'ed, in order
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def recognised(self) -> bool:
        return self.evidence is not None

    def note(self) -> str:
        """What was found, in a sentence (the run header's line)."""
        return f"detected: {self.line()}" if self.recognised else NONE_FOUND.format(url=self.url)

    def line(self) -> str:
        """``engine_extra.detected`` (the report's "Detected" row)."""
        if self.recognised:
            return f"{self.kind} (by {self.evidence})"
        return f"none ({NONE_FOUND.format(url=self.url)})"

    def record(self) -> dict[str, Any]:
        """Stored as ``engine_extra.detection``."""
        return {"kind": self.kind, "recognised": self.recognised, "by": self.evidence, "ms": round(self.ms, 1),
                "asked": self.asked, **({"detail": self.detail} if self.detail else {})}  # fmt: skip


def _recognisers(pm: pluggy.PluginManager) -> list[tuple[int, str, Any]]:
    from infermatrix.core.registry import engine_registry

    out = []
    for kind, entry in engine_registry(pm).items():
        cls = entry.engine
        if cls is not None and getattr(cls, "recognise", None) is not None:
            out.append((int(getattr(cls, "recognise_order", 100)), kind, cls))
    return sorted(out, key=lambda t: (t[0], t[1]))


async def detect_engine(pm: pluggy.PluginManager, client: httpx.AsyncClient, base_url: str,
                        headers: dict[str, str] | None = None) -> Detection:  # fmt: skip
    """Ask each engine class's recogniser, in order; the first yes wins. A recogniser that raises is a
    bug in its plugin, said as such (one line), not a silent no."""
    from infermatrix.core.engine.contract import normalize_base_url

    t0 = time.perf_counter()
    probe = ServerProbe(client, normalize_base_url(base_url), headers)
    for _, kind, cls in _recognisers(pm):
        try:
            found = await cls.recognise(probe)
        except Exception as exc:
            raise ConfigError(f"engine.kind auto: the {kind} engine's recogniser failed ({type(exc).__name__}: {exc})") from None
        if found is not None:
            return Detection(kind, found.evidence, probe.base_url, (time.perf_counter() - t0) * 1000, list(probe.answers), dict(found.detail))
    return Detection(FALLBACK_KIND, None, probe.base_url, (time.perf_counter() - t0) * 1000, list(probe.answers))


def resolve_auto(pm: pluggy.PluginManager, cfg: RunConfig, detection: Detection) -> None:
    """Replace ``cfg.engine`` (kind ``auto``) by the detected kind's config, with the same common fields."""
    from infermatrix.core.registry import engine_config_classes

    classes = engine_config_classes(pm)
    target = classes.get(detection.kind)
    if target is None:
        raise ConfigError(f"engine.kind auto: no plugin registers engine kind {detection.kind!r}")
    given = cfg.engine.model_dump(exclude={"kind"}, exclude_unset=True)
    try:
        cfg.engine = target.model_validate({**given, "kind": detection.kind})
    except ValueError as exc:
        raise ConfigError(f"engine.kind auto: found {detection.kind}, but the config does not fit it: {exc}") from None
