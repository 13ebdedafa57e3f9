"""The reference fold: an independent, deliberately simple model of every projection.

:mod:`projections.reference.fold` is the specification of what each event does to each
store (facts, history, conflicts, vectors, summaries, and the marks every store keeps);
:mod:`projections.reference.readable` reads what it needs of sealed fields beforehand,
so the fold itself is pure Python. Property tests and ``memledger verify`` compare the
real stores with it.
"""

from projections.reference.fold import ExpectedPoint, Mark, ReferenceFold, Row
from projections.reference.readable import Readable, read_sealed, sealed_fields

__all__ = ["ExpectedPoint", "Mark", "Readable", "ReferenceFold", "Row", "read_sealed", "sealed_fields"]
