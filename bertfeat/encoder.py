"""Encoder: texts in, pooled float32 features out.

Two stages, so a pipeline can overlap them (tokenize the next chunk while the model runs):
  prepare(texts, pairs)  -> Prepared   (tokenize, truncate or cut into windows; no model)
  run(prepared)          -> features   (length-sorted token-budget batches through the model, pooled)
``Encoder.encode`` is both in a row. A row's vector does not depend on its batch neighbours:
attention masks padded keys exactly and pooling ignores padded positions.
"""

from __future__ import annotations

import json
import queue
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from . import gemm
from .config import BertConfig
from .errors import BertfeatError
from .hub import ModelLocation, resolve_model
from .model import Workspace, bert_forward, pooler
from .threads import default_threads
from .pooling import LAYER_AGGS, POOLINGS, TOKEN_POOLS, combine_layers, l2_normalize, parse_layers
from .tokenize import BertTokenizer, Tokenized, pad_batch
from .weights import BertWeights, load_weights, weights_sha256

LONG_TEXT_MODES = ("truncate", "chunk-mean", "chunk-max", "error")
#: Token budget per batch (padded rows x length). With the fused kernels (kernels.py) a batch's
#: working set in cache matters more than per-call overhead: 1,024 was 12-15 % faster than 2,048
#: on both benchmark models (2 threads, benchmarks/RESULTS.md), and 512-1,024 about level.
DEFAULT_BATCH_TOKENS = 1024
MAX_BATCH_ROWS = 256


@dataclass(frozen=True)
class FeatureSpec:
    """Everything that decides what a feature vector means (and so goes into provenance)."""

    pooling: str
    layers: tuple[int, ...]  # hidden-state indices 0..L
    layer_agg: str
    normalize: bool
    max_length: int
    long_text: str = "truncate"
    stride: int = 32

    def to_dict(self) -> dict:
        d = asdict(self)
        d["layers"] = list(self.layers)
        return d


@dataclass
class Prepared:
    """Tokenized rows ready for the model: one or more windows per input row."""

    ids: list[np.ndarray]  # per window
    type_ids: list[np.ndarray]
    window_row: np.ndarray  # (n_windows,) input row of each window
    n_rows: int
    n_tokens: np.ndarray  # (n_rows,) tokens before truncation, special tokens included
    truncated: np.ndarray  # (n_rows,) bool
    n_chunks: np.ndarray  # (n_rows,) int32 windows per row

    @property
    def real_tokens(self) -> int:
        return int(sum(len(a) for a in self.ids))


@dataclass
class EncodeResult:
    features: np.ndarray  # (n, D) float32
    n_tokens: np.ndarray
    truncated: np.ndarray
    n_chunks: np.ndarray


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except json.JSONDecodeError as e:
        raise BertfeatError(f"{path} is not valid JSON ({e})", "restore it from the checkpoint") from None


def default_pooling(model_dir: Path) -> tuple[str, str]:
    """The sentence-transformers pooling of a model (1_Pooling/config.json), else mean: (mode, where from)."""
    pool_dir = "1_Pooling"
    for m in _read_json(model_dir / "modules.json") if (model_dir / "modules.json").is_file() else []:
        if isinstance(m, dict) and str(m.get("type", "")).endswith("Pooling") and m.get("path"):
            pool_dir = m["path"]
    cfg = _read_json(model_dir / pool_dir / "config.json")
    if cfg:
        if cfg.get("pooling_mode_cls_token"):
            return "cls", f"{pool_dir}/config.json"
        if cfg.get("pooling_mode_max_tokens"):
            return "max", f"{pool_dir}/config.json"
        if cfg.get("pooling_mode_mean_tokens"):
            return "mean", f"{pool_dir}/config.json"
    return "mean", "default (the model has no 1_Pooling/config.json)"


def token_budget_batches(lengths: np.ndarray, budget: int, max_rows: int = MAX_BATCH_ROWS) -> list[np.ndarray]:
    """Sort rows by length and cut batches whose padded size (rows x longest) fits the token budget."""
    order = np.argsort(lengths, kind="stable")
    batches, start = [], 0
    n = len(order)
    while start < n:
        end = start + 1
        while end < n and end - start < max_rows and (end - start + 1) * lengths[order[end]] <= budget:
            end += 1
        batches.append(order[start:end])
        start = end
    return batches


class Encoder:
    """A BERT checkpoint loaded for feature extraction.

    >>> enc = Encoder()                                   # all-MiniLM-L6-v2
    >>> X = enc.encode(["a sentence", "another one"])     # (2, 384) float32

    ``precision="bf16"``: linear layers as bf16 GEMMs (MKL, the ``fast`` extra; see gemm.py and
    docs/precision.md); features stay float32. Refused, with what to do, where MKL or the CPU's
    bf16 support is missing.
    """

    def __init__(self, model: str | Path | None = None, *, max_length: int | None = None,
                 max_batch_tokens: int = DEFAULT_BATCH_TOKENS, threads: int | None = None,
                 location: ModelLocation | None = None, precision: str = "fp32"):
        if precision not in gemm.PRECISIONS:
            raise BertfeatError(f"unknown precision '{precision}'", f"choose one of {', '.join(gemm.PRECISIONS)}")
        self.precision = precision
        self.bf16_mode = gemm.require_bf16() if precision == "bf16" else None  # "amx", "avx512_bf16", "emulated"
        self.location = location or resolve_model(model)
        d = self.location.path
        self.config = BertConfig.from_file(d / "config.json")
        self.weights: BertWeights = load_weights(d, self.config, precision)
        st_cfg = _read_json(d / "sentence_bert_config.json")
        self.default_max_length = int(st_cfg.get("max_seq_length") or self.config.max_position_embeddings)
        self.default_max_length = min(self.default_max_length, self.config.max_position_embeddings)
        self.max_length = self._check_max_length(max_length) if max_length else self.default_max_length
        self.tokenizer = BertTokenizer.from_dir(d, self.config.max_position_embeddings)
        self.default_pooling, self.pooling_source = default_pooling(d)
        self.max_batch_tokens = int(max_batch_tokens)
        self.threads = int(threads) if threads else default_threads()
        self._sha256: str | None = None
        self._workspaces: queue.SimpleQueue[Workspace] = queue.SimpleQueue()  # one in use per running batch

    # ------------------------------------------------------------------ identity
    @property
    def model_id(self) -> str:
        return self.location.model_id

    @property
    def weights_sha256(self) -> str:
        if self._sha256 is None:
            self._sha256 = weights_sha256(self.weights.files)
        return self._sha256

    @property
    def hidden_size(self) -> int:
        return self.config.hidden_size

    def _check_max_length(self, n: int) -> int:
        P = self.config.max_position_embeddings
        if not 2 < int(n) <= P:
            raise BertfeatError(f"max length {n} is out of range", f"choose 3..{P} (the model's max_position_embeddings)")
        return int(n)

    def spec(self, pooling: str | None = None, layers=None, layer_agg: str = "mean", normalize: bool = False,
             max_length: int | None = None, long_text: str = "truncate", stride: int | None = None) -> FeatureSpec:
        """Validate encode options into a FeatureSpec."""
        pooling = pooling or self.default_pooling
        if pooling not in POOLINGS:
            raise BertfeatError(f"unknown pooling '{pooling}'", f"choose one of {', '.join(POOLINGS)}")
        if layer_agg not in LAYER_AGGS:
            raise BertfeatError(f"unknown layer aggregation '{layer_agg}'", f"choose one of {', '.join(LAYER_AGGS)}")
        if long_text not in LONG_TEXT_MODES:
            raise BertfeatError(f"unknown long-text mode '{long_text}'", f"choose one of {', '.join(LONG_TEXT_MODES)}")
        L = self.config.num_hidden_layers
        idx = parse_layers(layers, L)
        if pooling == "pooled":
            if self.weights.pooler_w is None:
                raise BertfeatError(
                    f"pooling 'pooled' is unavailable: {self.weights.missing_pooler_reason}",
                    "use --pooling cls, mean or max, or a checkpoint saved with its pooler (BertModel / BertForPreTraining)",
                )
            if idx != (L,):
                raise BertfeatError("pooling 'pooled' is defined on the last layer only",
                                    "drop --layers, or use --pooling cls to pool the [CLS] of other layers")
        max_length = self._check_max_length(max_length) if max_length else self.max_length
        stride = 32 if stride is None else int(stride)
        if long_text.startswith("chunk") and not 0 <= stride < max_length - 2:
            raise BertfeatError(f"stride {stride} is out of range for max length {max_length}",
                                f"choose a stride from 0 to {max_length - 3} (tokens shared by neighbouring windows)")
        return FeatureSpec(pooling, idx, layer_agg, bool(normalize), max_length, long_text, stride)

    def output_dim(self, spec: FeatureSpec) -> int:
        H = self.config.hidden_size
        return H * len(spec.layers) if spec.layer_agg == "concat" and spec.pooling != "pooled" else H

    def fingerprint(self, spec: FeatureSpec) -> dict:
        """What identifies the features: model, weights and every setting that changes a vector."""
        return {"model_id": self.model_id, "weights_sha256": self.weights_sha256, "precision": self.precision,
                **spec.to_dict()}

    # ------------------------------------------------------------------ stage 1: tokenize
    def prepare(self, texts: list[str], pairs: list[str] | None, spec: FeatureSpec) -> Prepared:
        """Tokenize rows and apply the long-text policy; windows for chunked rows."""
        tok = self.tokenizer
        t: Tokenized = tok.encode(list(texts), None if pairs is None else list(pairs), spec.max_length)
        n = len(t)
        n_chunks = np.ones(n, dtype=np.int32)
        window_row = np.arange(n, dtype=np.int64)
        if spec.long_text == "error" and t.truncated.any():
            raise LongTextError(np.flatnonzero(t.truncated), t.n_tokens, spec.max_length)
        if not spec.long_text.startswith("chunk") or not t.truncated.any():
            return Prepared(t.ids, t.type_ids, window_row, n, t.n_tokens, t.truncated, n_chunks)
        if pairs is not None:
            raise BertfeatError("--long-text chunk-* works on single texts, not sentence pairs",
                                "use --long-text truncate (or error) with --pair-column")
        ids, type_ids, rows = [], [], []
        long_rows = set(np.flatnonzero(t.truncated).tolist())
        content = dict(zip(sorted(long_rows), tok.encode_content([texts[i] for i in sorted(long_rows)])))
        for r in range(n):
            if r not in long_rows:
                ids.append(t.ids[r]); type_ids.append(t.type_ids[r]); rows.append(r)
                continue
            wins = chunk_windows(content[r], spec.max_length - 2, spec.stride)
            for w in wins:
                a = np.concatenate([[tok.cls_id], w, [tok.sep_id]]).astype(np.int32)
                ids.append(a); type_ids.append(np.zeros_like(a)); rows.append(r)
            n_chunks[r] = len(wins)
        truncated = np.zeros(n, dtype=bool)  # chunked rows keep every token
        return Prepared(ids, type_ids, np.asarray(rows, dtype=np.int64), n, t.n_tokens, truncated, n_chunks)

    # ------------------------------------------------------------------ stage 2: model
    def run(self, prep: Prepared, spec: FeatureSpec) -> np.ndarray:
        """Windows through the model in length-sorted token-budget batches; pooled, combined per row."""
        D = self.output_dim(spec)
        win = np.empty((len(prep.ids), D), dtype=np.float32)
        lengths = np.fromiter((len(a) for a in prep.ids), dtype=np.int64, count=len(prep.ids))
        batches = token_budget_batches(lengths, self.max_batch_tokens)

        def one(batch: np.ndarray) -> np.ndarray:
            input_ids, types, mask = pad_batch([prep.ids[i] for i in batch], [prep.type_ids[i] for i in batch],
                                               self.tokenizer.pad_id)
            return self.pool_batch(input_ids, types, mask, spec)

        for batch, pooled in zip(batches, parallel_map(one, batches, self.threads)):
            win[batch] = pooled
        if len(prep.ids) == prep.n_rows:  # one window per row, in row order
            out = win
        else:
            out = combine_windows(win, prep.window_row, lengths, prep.n_rows,
                                  "max" if spec.long_text == "chunk-max" else "mean")
        return l2_normalize(out) if spec.normalize else out

    def pool_batch(self, input_ids: np.ndarray, types: np.ndarray, mask: np.ndarray, spec: FeatureSpec) -> np.ndarray:
        """One padded batch (B, T) -> (B, D) pooled features (before normalization).

        Scratch memory comes from a pool of workspaces, one per batch in flight, kept across calls.
        """
        try:
            ws = self._workspaces.get_nowait()
        except queue.Empty:
            ws = Workspace()
        try:
            fwd = bert_forward(self.weights, input_ids, types, mask, keep=spec.layers, ws=ws)
            if spec.pooling == "pooled":
                return pooler(self.weights, fwd.hidden[self.config.num_hidden_layers][:, 0, :])
            pool = TOKEN_POOLS[spec.pooling]
            return combine_layers([pool(fwd.hidden[i], mask) for i in spec.layers], spec.layer_agg)
        finally:
            self._workspaces.put(ws)

    # ------------------------------------------------------------------ one call
    def encode(self, texts, pairs=None, pooling: str | None = None, layers=None, layer_agg: str = "mean",
               normalize: bool = False, max_length: int | None = None, long_text: str = "truncate",
               stride: int | None = None, return_info: bool = False):
        """Texts (and optional pairs) -> (n, D) float32 features; with return_info an EncodeResult."""
        if isinstance(texts, str):
            texts = [texts]
        if isinstance(pairs, str):
            pairs = [pairs]
        spec = self.spec(pooling, layers, layer_agg, normalize, max_length, long_text, stride)
        texts = list(texts)
        if not texts:
            X = np.zeros((0, self.output_dim(spec)), dtype=np.float32)
            info = EncodeResult(X, np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0, np.int32))
            return info if return_info else X
        prep = self.prepare(texts, pairs, spec)
        X = self.run(prep, spec)
        if return_info:
            return EncodeResult(X, prep.n_tokens, prep.truncated, prep.n_chunks)
        return X


def parallel_map(fn, items: list, threads: int) -> list:
    """fn over items, in order, with BLAS held to one thread per call.

    With threads > 1, batches run side by side in threads: NumPy releases the GIL in BLAS and
    ufuncs, so the element-wise work (GELU, LayerNorm, softmax), not only the GEMMs, uses every
    core. One BLAS thread per batch also makes a row's result independent of how many batches
    (or threads) there are.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        if threads <= 1 or len(items) <= 1:
            return [fn(x) for x in items]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(threads, thread_name_prefix="bertfeat") as ex:
            return list(ex.map(fn, items))


class LongTextError(BertfeatError):
    """Rows longer than max length under --long-text error."""

    def __init__(self, rows: np.ndarray, n_tokens: np.ndarray, max_length: int):
        self.rows = rows
        r = int(rows[0])
        super().__init__(
            f"row {r} has {int(n_tokens[r])} tokens, more than max length {max_length}"
            + (f" ({len(rows)} rows are too long)" if len(rows) > 1 else ""),
            "use --long-text truncate, chunk-mean or chunk-max, or a larger --max-length",
        )


def chunk_windows(content: np.ndarray, width: int, stride: int) -> list[np.ndarray]:
    """Overlapping windows of at most ``width`` word pieces; neighbours share ``stride`` pieces."""
    step = width - stride
    out, start = [], 0
    while True:
        out.append(content[start:start + width])
        if start + width >= len(content):
            return out
        start += step


def combine_windows(win: np.ndarray, window_row: np.ndarray, lengths: np.ndarray, n_rows: int, how: str) -> np.ndarray:
    """(n_windows, D) -> (n_rows, D): token-weighted mean or element-wise max of each row's windows."""
    D = win.shape[1]
    if how == "max":
        out = np.full((n_rows, D), -np.inf, dtype=np.float32)
        np.maximum.at(out, window_row, win)
        return out
    w = lengths.astype(np.float64)
    out = np.zeros((n_rows, D), dtype=np.float64)
    np.add.at(out, window_row, win.astype(np.float64) * w[:, None])
    tot = np.bincount(window_row, weights=w, minlength=n_rows)
    return (out / tot[:, None]).astype(np.float32)
