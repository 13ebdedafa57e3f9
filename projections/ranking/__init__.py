"""How recall ranks, without I/O: the ranker port and its voices, weighted reciprocal
rank fusion, recency and importance shaping, maximal marginal relevance, a token budget.

- :mod:`~projections.ranking.config`: :class:`RankingConfig`, the switches and weights.
- :mod:`~projections.ranking.candidates`: what a ranker reads (``Candidate``, ``Signals``).
- :mod:`~projections.ranking.port`: the ``Ranker`` port and ``Ranking``.
- the voices: :mod:`~projections.ranking.direct` (full text, vectors),
  :mod:`~projections.ranking.lineage`, :mod:`~projections.ranking.sessions`,
  :mod:`~projections.ranking.neighbours`.
- :mod:`~projections.ranking.fusion`, :mod:`~projections.ranking.shaping`,
  :mod:`~projections.ranking.mmr`, :mod:`~projections.ranking.budget`.
- :mod:`~projections.ranking.pipeline`: the order in which recall applies them.

:mod:`projections.recall` fetches the signals and the rows and calls these.
"""
