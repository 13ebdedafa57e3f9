"""``memledger eval recall``: how well recall ranks, on LoCoMo.

For each question of categories 1-4 (the evaluation set, :mod:`.dataset`), the
ledger's recall is asked once per variant (:mod:`.variants`: the fusion, each ranker
alone, the fusion without each ranker and each shaping step, the full-text scorings),
the cache bypassed, next to baselines computed in the same run (:mod:`.baselines`:
BM25 with bm25s, dense cosine). Every variant and baseline is measured with ir-measures
(:mod:`.measures`: R@1/5/10/25, MRR, nDCG@10), overall and per category, with the tokens
of its top 10 results per query and its latency (:mod:`.report`).
"""

from workers.recall_eval.dataset import CATEGORY_NAMES, EvalQuery, EvalSet, load_eval_set
from workers.recall_eval.ledger_stores import stores_of
from workers.recall_eval.report import EvalReport, Row
from workers.recall_eval.runner import DEPTH, TOKENS_AT, Stores, evaluate
from workers.recall_eval.variants import Variant, variants

__all__ = [
    "CATEGORY_NAMES",
    "DEPTH",
    "TOKENS_AT",
    "EvalQuery",
    "EvalReport",
    "EvalSet",
    "Row",
    "Stores",
    "Variant",
    "evaluate",
    "load_eval_set",
    "stores_of",
    "variants",
]
