"""Benchmarks on the real services (Kafka, PostgreSQL, Redis), each figure printed next
to the baseline measured in the same run, its target and its verdict
(``workers.bench.figures``, targets in ``workers.bench.targets``):

- ``append``: events/s through ``Ledger.write_many`` into Kafka, next to a raw
  kafka-python producer sending the same bytes;
- ``lag``: acknowledgement -> applied, per projection, at a steady write rate;
- ``erasure``: acknowledgement -> absent by every probe, and -> ``trace`` complete, under
  the same write load;
- ``locomo``: LoCoMo through Kafka into all four stores next to the embedder alone, then
  recall quality and latency next to BM25;
- ``replay``: facts alone and all four in one pass from offset 0, next to a raw
  kafka-python read of the same topic.

``env`` makes a fresh database and topics per run (runs do not disturb each other) and
starts the faust workers; ``load`` is the write load.
"""

from workers.bench.env import BenchTargets, bench_environment
from workers.bench.figures import Figure, Target, render_figures

__all__ = ["BenchTargets", "Figure", "Target", "bench_environment", "render_figures"]
