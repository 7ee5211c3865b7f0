"""The names closest to one that a checkpoint does not hold, for ``qarm explain``'s error."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import chain
from operator import attrgetter, itemgetter, methodcaller

from ..modules.inventory import ModuleInfo

SUGGESTIONS = 5

_ENGINE_NAME, _OPERANDS, _NAME = attrgetter("engine_name"), attrgetter("operands"), itemgetter(0)


def closest_names(modules: Mapping[str, ModuleInfo], name: str) -> list[str]:
    """The closest names, best first: those ending in the query's dotted tail (an alias prefix
    left off or added: ``model.layers.0`` for ``model.language_model.layers.0``), then the most
    alike of all (a similarity of at least 60 of 100), ties in name order.

    Similarity is rapidfuzz's ``fuzz.ratio`` (the Indel distance, normalised): bit-parallel,
    where difflib's grows with the product of the two lengths (300 names of 6 000 characters
    took 9.8 s)."""
    # in C: a million tensor names, each looked at once or twice
    infos = modules.values()
    candidates = set(modules)
    candidates.update(map(_ENGINE_NAME, infos))
    candidates.update(map(_NAME, chain.from_iterable(map(dict.values, map(_OPERANDS, infos)))))
    parts = name.split(".")
    tails: list[str] = []
    # every tail ends in the query's last component: the candidates are scanned once for it
    last = methodcaller("endswith", "." + parts[-1])
    ending = list(filter(last, candidates)) if len(parts) > 2 else []
    for k in range(1, len(parts) - 1):  # a tail of at least two components
        tail = methodcaller("endswith", "." + ".".join(parts[k:]))
        tails = most_alike(name, filter(tail, ending), cutoff=0)
        if tails:
            break
    close = most_alike(name, candidates, cutoff=60)
    return list(dict.fromkeys([*tails, *close]))[:SUGGESTIONS]


def most_alike(name: str, candidates: Iterable[str], *, cutoff: float) -> list[str]:
    """Up to :data:`SUGGESTIONS` of ``candidates`` scoring at least ``cutoff``, best first and
    ties in name order (not in the candidates' order, which a set's hashing makes vary from
    one process to the next)."""
    from rapidfuzz import fuzz, process  # here: only a name not found needs it

    pool = list(candidates)
    found = process.extract(name, pool, scorer=fuzz.ratio, limit=SUGGESTIONS, score_cutoff=cutoff)
    if len(found) == SUGGESTIONS:  # every name tied with the last one kept, to choose by name
        # below the last score: extract turns a cutoff into a distance, and a name scoring
        # exactly the cutoff can fall short of it (85.714... kept 1 of 6 names tied there)
        edge = min(match[1] for match in found) - 0.5
        found = process.extract(name, pool, scorer=fuzz.ratio, limit=None, score_cutoff=edge)
    ranked = sorted(found, key=lambda match: (-match[1], match[0]))
    return [match[0] for match in ranked[:SUGGESTIONS]]
