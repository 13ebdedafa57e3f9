"""Shaping the fused score: recency and importance.

``shaped = fused * (1 - w_r + w_r * S(age)) * (1 - w_i + w_i * I)``: each factor mixes 1
(no effect) with its signal by a weight in [0, 1], so a weight of 0 turns it off and the
fused order is kept.

Recency: the Weibull survival function ``S(t) = exp(-(t / scale) ** shape)`` of the age
``t`` (days from ``provenance.written_at`` to the time judged, ``now`` or ``as_of``; never
negative) with per-kind parameters (:data:`RECENCY`). The Weibull distribution (W. Weibull,
"A statistical distribution function of wide applicability", J. Appl. Mech. 18, 1951)
covers both shapes memory research found: ``shape = 1`` is exponential decay (as in
Park et al., "Generative Agents", UIST 2023: 0.995 per hour), ``shape = 0.5`` the
exponential in the square root of time that Rubin and Wenzel ("One hundred years of
forgetting", Psychological Review 103, 1996) found among the best fits of retention
data. The scales say how long a memory of each kind stays current; they are design
choices, not fitted (LoCoMo holds only conversation turns, all of one kind).

Importance: ``I = 1 - (1 - confidence) * (1 - e)`` with ``e = 1`` for a memory the subject
confirmed, else 0; that is, the noisy-OR the ledger uses for reinforcement (README, "The
life of a memory") with the confirmation as certain evidence. ``confidence`` starts from
veracity (stated 1.0, inferred 0.7, imported 0.6, tool 0.5) and rises with each
reinforcement, so importance reflects veracity, reinforcement and confirmation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Final

from projections.ranking.candidates import Candidate

__all__ = ["RECENCY", "Weibull", "importance", "shaping_factor"]

SECONDS_PER_DAY: Final = 86_400.0


@dataclass(frozen=True)
class Weibull:
    """A Weibull survival function: ``scale_days`` > 0, ``shape`` > 0."""

    scale_days: float
    shape: float

    def survival(self, age_days: float) -> float:
        """``exp(-(age / scale) ** shape)`` in (0, 1]; an age below 0 counts as 0."""
        return math.exp(-((max(age_days, 0.0) / self.scale_days) ** self.shape))


RECENCY: Final[Mapping[str, Weibull]] = MappingProxyType(
    {
        "task_state": Weibull(scale_days=7.0, shape=1.0),
        "preference": Weibull(scale_days=365.0, shape=0.5),
        "inference": Weibull(scale_days=180.0, shape=0.5),
        "summary": Weibull(scale_days=365.0, shape=0.5),
        "fact": Weibull(scale_days=3650.0, shape=0.5),
    }
)
"""Per kind: a task's state goes stale in days (exponentially); a preference over a
year or so, an inference sooner, a fact about the subject over a decade; the square root
of time for all but task state (see the module docstring)."""

_DEFAULT_RECENCY: Final = RECENCY["fact"]


def importance(candidate: Candidate) -> float:
    """``1 - (1 - confidence) * (1 - e)``, ``e`` = 1 if confirmed, else 0; in [0, 1]."""
    evidence = 1.0 if candidate.confirmed else 0.0
    return 1.0 - (1.0 - min(max(candidate.confidence, 0.0), 1.0)) * (1.0 - evidence)


def shaping_factor(candidate: Candidate, at: datetime, recency_weight: float, importance_weight: float) -> float:
    """The factor that multiplies ``candidate``'s fused score at time ``at`` (aware UTC):
    ``(1 - w_r + w_r * S(age)) * (1 - w_i + w_i * I)``, in (0, 1]."""
    age_days = (at - candidate.written_at).total_seconds() / SECONDS_PER_DAY
    recency = RECENCY.get(candidate.kind, _DEFAULT_RECENCY).survival(age_days)
    return (1.0 - recency_weight + recency_weight * recency) * (
        1.0 - importance_weight + importance_weight * importance(candidate)
    )
