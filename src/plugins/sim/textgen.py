"""Output text: deterministic pseudo-natural language, one sim token per word.

Words are drawn with Zipf-like weights from a fixed vocabulary of short lowercase words, each sent
with a leading space, so every word is exactly one token of the sim tokenizer and random text never
looks periodic to a loop detector. A looping stream switches, after ``loop_after`` tokens, to
repeating a fixed cycle of ``period`` words drawn once from the same generator.
"""

from __future__ import annotations

import itertools
import random

__all__ = ["WORDS", "TextStream"]

_RAW = """
the of and to in is it that was for on are as with his they at be this have from or one had by
word but not what all were we when your can said there use an each which she do how their if will
up other about out many then them these so some her would make like him into time has look two
more write go see number no way could people my than first water been call who oil its now find
long down day did get come made may part over new sound take only little work know place year live
me back give most very after thing our just name good say great where help much before line right
too mean old any same tell boy follow came want show also around form three small set put end does
another well large must big even such turn here why ask went men read need land differ home us move
try kind hand change off play spell air away animal house point page letter mother answer found
study still learn should world high every near add food below ocean plant cover country last
school father keep tree never start city earth eye light though head under story saw left few
while along might close thing seem next hard open begin life always those both paper together got
group often run river car feet care second book carry took rain eat room friend began idea fish
mount stop once base hear horse cut sure watch color face wood main enough plain girl usual young
ready above ever red list feel talk bird soon body dog family direct pose leave song measure door
black short field rest order fire south piece told knew pass since top whole king space heard best
hour better true during five step early hold west ground reach fast verb sing listen six table
travel less simple ten toward war lay class cold plan notice voice energy hunt bed brother egg ride
cell sun fill east paint among grand ball yet wave drop heart am green quick rock street weather
miss sea run glass wait noise sleep snow gold hot ship dream bright mind stone corn bed bank metal
iron arrow cloud lake quiet ring storm salt warm ice calm path field tiny mild soft grey bold slow
wide thin deep flat rough round sharp sweet sour dark clean fresh empty full heavy loud proud
silent rare odd plain vast wild brave kind gentle honest clever lucky eager fair fond firm grim
keen neat pale rich safe tall weak wise worn young vivid
"""

WORDS: tuple[str, ...] = tuple(dict.fromkeys(w for w in _RAW.split() if 1 <= len(w) <= 6 and w.isalpha() and w.islower()))
_SPACED = tuple(" " + w for w in WORDS)
# Zipf-like weights (rank^-0.9) make the text read like language rather than a uniform shuffle.
_CUM = list(itertools.accumulate(1.0 / (r + 1) ** 0.9 for r in range(len(WORDS))))


class TextStream:
    """The words one request will say; ``take(n)`` returns the next ``n`` tokens as text."""

    __slots__ = ("_rng", "_pos", "_loop_after", "_cycle")

    def __init__(self, rng: random.Random, loop_after: int | None = None, period: int = 0):
        self._rng = rng
        self._pos = 0
        self._loop_after = loop_after if period > 0 else None
        # The cycle is drawn up front so the looped text depends only on the seed.
        self._cycle = tuple(rng.choices(_SPACED, cum_weights=_CUM, k=period)) if self._loop_after is not None else ()

    def take(self, n: int) -> str:
        start = self._pos
        self._pos += n
        after = self._loop_after
        if after is None or start + n <= after:
            return "".join(self._rng.choices(_SPACED, cum_weights=_CUM, k=n))
        fresh = max(0, after - start)
        parts = self._rng.choices(_SPACED, cum_weights=_CUM, k=fresh) if fresh else []
        period = len(self._cycle)
        parts.extend(self._cycle[(i - after) % period] for i in range(start + fresh, start + n))
        return "".join(parts)
