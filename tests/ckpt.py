"""Random-weight BERT checkpoints in Hugging Face layout, for tests (a helper, not a test module).

    from ckpt import make_checkpoint, reference_model

    d = make_checkpoint(tmp_path / "m", vocab="chinese", hidden_act="relu", prefix=True, legacy_names=True)
    enc = Encoder(d)                  # bertfeat loads it like any local model directory
    ref = reference_model(d)          # the same weights as a torch transformers model (eval, fp32)

The weights are drawn with NumPy (``canonical_tensors``: no torch needed to make a checkpoint) under the
tensor names transformers' ``BertModel`` (or ``BertForMaskedLM`` with ``mlm_head=True``) uses, from
``seed``, so that *every* tensor is informative: LayerNorm gains are 1 + N(0, 0.1), every bias and LayerNorm shift is N(0, 0.1) (none is
left at 0 or 1, so a swapped gamma/beta or a dropped bias shows), and linear weights are
N(0, 1/fan_in), which keeps hidden states O(1) and attention neither uniform nor one-hot.

``reference_model`` (torch, for the ``live`` parity tests only) builds transformers' model from the record
written next to the weights (``bertfeat_test_checkpoint.json``: the config and the seed) and loads the
canonical tensors drawn again from that record with ``load_state_dict(strict=True)`` (so a name missing
from or extra to transformers' model fails there), not the saved file, so name rewriting (``bert.`` prefix, gamma/beta, shards) is checked against an
independent reference rather than against itself.

Layout written (what ``save_pretrained`` writes, plus the rewrites asked for):
  config.json                     transformers' BertConfig (+ ``config_overrides``)
  model.safetensors               or model-0000k-of-0000n.safetensors + model.safetensors.index.json
  vocab.txt + tokenizer_config.json   (tokenizer="vocab"), tokenizer.json + tokenizer_config.json
                                  (tokenizer="json"), all of them ("both"), or none (None)
  sentence_bert_config.json       only with ``st_max_seq_length``
  modules.json + 1_Pooling/config.json   only with ``st_pooling``
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# The vocab files are committed (tests/data/README.md says where they come from).
TEST_DATA = ROOT / "tests" / "data"

VOCABS = {
    # name -> (vocab.txt, do_lower_case as the original checkpoint's tokenizer_config.json says)
    "uncased": (TEST_DATA / "vocab" / "bert-base-uncased" / "vocab.txt", True),
    "chinese": (TEST_DATA / "vocab" / "bert-base-chinese" / "vocab.txt", False),
}
RECORD = "bertfeat_test_checkpoint.json"


def vocab_file(vocab: str | os.PathLike) -> Path:
    """'uncased' / 'chinese' -> the shared bert-base-uncased / bert-base-chinese vocab.txt; a path as is."""
    if str(vocab) in VOCABS:
        return VOCABS[str(vocab)][0]
    return Path(vocab)


def _vocab_size(path: Path) -> int:
    with open(path, encoding="utf-8") as fh:
        return sum(1 for _ in fh)


def make_checkpoint(
    dir: str | os.PathLike,
    *,
    vocab: str | os.PathLike = "uncased",
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    intermediate: int | None = None,
    hidden_act: str = "gelu",
    max_position: int = 512,
    type_vocab: int = 2,
    layer_norm_eps: float = 1e-12,
    prefix: bool | None = None,
    legacy_names: bool = False,
    sharded: bool | int = False,
    pooler: bool = True,
    mlm_head: bool = False,
    store_decoder: bool = False,
    seed: int = 0,
    tokenizer: str | None = "vocab",
    do_lower_case: bool | None = None,
    st_max_seq_length: int | None = None,
    st_pooling: str | None = None,
    config_overrides: dict | None = None,
) -> Path:
    """Write a random-weight BERT checkpoint to ``dir`` (created) and return ``dir`` as a Path.

    Architecture: ``hidden`` / ``layers`` / ``heads`` / ``intermediate`` (default 4 * hidden) /
    ``hidden_act`` / ``max_position`` / ``type_vocab`` / ``layer_norm_eps``; the vocab size is the
    real one of ``vocab`` ('uncased' 30522, 'chinese' 21128, or the line count of a vocab.txt path).

    Tensor names: ``prefix`` True adds ``bert.`` to every encoder tensor, False strips it, None keeps
    what save_pretrained writes (none for BertModel, ``bert.`` for BertForMaskedLM); the MLM head's
    ``cls.predictions.*`` never gets the prefix. ``legacy_names`` renames every LayerNorm
    ``weight``/``bias`` to ``gamma``/``beta``. ``sharded`` (True = 3, or a shard count) splits the
    tensors over ``model-0000k-of-0000n.safetensors`` with ``model.safetensors.index.json``.

    Heads: ``pooler`` False drops ``pooler.dense.*``; ``mlm_head`` builds BertForMaskedLM (which has
    ``cls.predictions.transform.*`` and ``cls.predictions.bias``; its decoder is tied to the word
    embeddings and, as in save_pretrained, not stored unless ``store_decoder``). With both
    ``mlm_head`` and ``pooler`` the file also has ``bert.pooler.*`` as BertForPreTraining checkpoints do.

    Tokenizer: 'vocab' (vocab.txt + tokenizer_config.json), 'json' (tokenizer.json saved by
    transformers' BertTokenizer + tokenizer_config.json, no vocab.txt), 'both', or None.
    ``do_lower_case`` defaults to the original checkpoint's (True for uncased, False for chinese).

    sentence-transformers files: ``st_max_seq_length`` writes sentence_bert_config.json (read beside a
    modules.json only, as sentence-transformers reads it: give ``st_pooling`` too);
    ``st_pooling`` ('mean' / 'cls' / 'max') writes modules.json and 1_Pooling/config.json.
    ``config_overrides`` is merged into config.json last (e.g. {"model_type": "roberta"}).
    """
    from safetensors.numpy import save_file

    d = Path(dir)
    d.mkdir(parents=True, exist_ok=True)
    vpath = vocab_file(vocab)
    if do_lower_case is None:
        do_lower_case = VOCABS[str(vocab)][1] if str(vocab) in VOCABS else True
    record = {
        "config": {
            "vocab_size": _vocab_size(vpath),
            "hidden_size": hidden,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "intermediate_size": intermediate or 4 * hidden,
            "hidden_act": hidden_act,
            "max_position_embeddings": max_position,
            "type_vocab_size": type_vocab,
            "layer_norm_eps": layer_norm_eps,
            "pad_token_id": 0,
        },
        "seed": seed,
        "mlm_head": mlm_head,
        "pooler": pooler,
    }
    canonical = canonical_tensors(json.dumps(record, sort_keys=True))

    # ---- config.json: the fields save_pretrained writes for a BertConfig, + absolute positions spelled out
    cfg = {**record["config"], "model_type": "bert", "attention_probs_dropout_prob": 0.1,
           "hidden_dropout_prob": 0.1, "initializer_range": 0.02, "use_cache": True,
           "classifier_dropout": None, "is_decoder": False, "add_cross_attention": False,
           "tie_word_embeddings": True, "dtype": "float32"}
    cfg["architectures"] = ["BertForMaskedLM" if mlm_head else "BertModel"]
    cfg["position_embedding_type"] = "absolute"
    cfg.update(config_overrides or {})
    (d / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    (d / RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")

    # ---- tensors, renamed as asked
    tensors = {}
    for name, t in canonical.items():
        if name.startswith("cls.predictions.decoder.") and not (store_decoder and name.endswith("weight")):
            continue  # tied to the word embeddings / cls.predictions.bias
        if name.startswith("cls."):
            out = name
        else:
            base = name[len("bert."):] if name.startswith("bert.") else name
            keep_prefix = name.startswith("bert.") if prefix is None else prefix
            out = "bert." + base if keep_prefix else base
        if legacy_names and ".LayerNorm." in out:
            out = out[: -len(".weight")] + ".gamma" if out.endswith(".weight") else out[: -len(".bias")] + ".beta"
        tensors[out] = t
    for f in list(d.glob("*.safetensors")) + [d / "model.safetensors.index.json"]:
        f.unlink(missing_ok=True)
    if sharded:
        n = 3 if sharded is True else int(sharded)
        names = list(tensors)
        per = math.ceil(len(names) / n)
        weight_map = {}
        for k in range(n):
            fname = f"model-{k + 1:05d}-of-{n:05d}.safetensors"
            part = {name: tensors[name] for name in names[k * per:(k + 1) * per]}
            save_file(part, str(d / fname), metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(part, fname))
        index = {"metadata": {"total_size": int(sum(a.nbytes for a in tensors.values()))}, "weight_map": weight_map}
        (d / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    else:
        save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})

    # ---- tokenizer files
    if tokenizer not in ("vocab", "json", "both", None):
        raise ValueError(f"tokenizer must be 'vocab', 'json', 'both' or None, not {tokenizer!r}")
    tok_cfg = {"do_lower_case": do_lower_case, "tokenizer_class": "BertTokenizer", "model_max_length": max_position}
    for f in ("vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        (d / f).unlink(missing_ok=True)
    if tokenizer in ("vocab", "both"):
        shutil.copyfile(vpath, d / "vocab.txt")
    if tokenizer in ("json", "both"):
        (d / "tokenizer.json").write_text(tokenizer_json(vpath, do_lower_case), encoding="utf-8")
    if tokenizer is not None:
        (d / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")

    # ---- sentence-transformers files
    if st_max_seq_length is not None:
        (d / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": st_max_seq_length, "do_lower_case": False}))
    if st_pooling is not None:
        modules = [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        ]
        (d / "modules.json").write_text(json.dumps(modules, indent=2))
        (d / "1_Pooling").mkdir(exist_ok=True)
        (d / "1_Pooling" / "config.json").write_text(json.dumps({
            "word_embedding_dimension": hidden,
            "pooling_mode_cls_token": st_pooling == "cls",
            "pooling_mode_mean_tokens": st_pooling == "mean",
            "pooling_mode_max_tokens": st_pooling == "max",
            "pooling_mode_mean_sqrt_len_tokens": False,
        }, indent=2))
    return d


@lru_cache(maxsize=8)
def tokenizer_json(vocab_path: Path, do_lower_case: bool) -> str:
    """The tokenizer.json transformers' (fast) BertTokenizer saves for this vocab and lower-casing (without
    transformers: the same pipeline built with `tokenizers` alone, as transformers' converter builds it)."""
    try:
        from transformers import BertTokenizer
    except ImportError:
        from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
        from tokenizers.models import WordPiece

        with open(vocab_path, encoding="utf-8") as fh:  # line by line as transformers' load_vocab (not splitlines)
            vocab = {t.rstrip(): i for i, t in enumerate(fh)}
        tk = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
        tk.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                                   lowercase=do_lower_case)
        tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        cls, sep = vocab["[CLS]"], vocab["[SEP]"]
        tk.post_processor = processors.TemplateProcessing(single="[CLS]:0 $A:0 [SEP]:0",
                                                          pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
                                                          special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
        tk.decoder = decoders.WordPiece(prefix="##")
        for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"):
            tk.add_special_tokens([t])
        return tk.to_str(pretty=True)

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copyfile(vocab_path, Path(tmp) / "vocab.txt")
        (Path(tmp) / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": do_lower_case}))
        tok = BertTokenizer.from_pretrained(tmp)
        return tok.backend_tokenizer.to_str(pretty=True)


def reference_model(dir: str | os.PathLike):
    """The torch model (BertModel, or BertForMaskedLM with mlm_head) whose weights ``dir`` holds.

    Built from the checkpoint's record (config + seed) with the canonical tensors loaded strictly, eval
    mode, float32. Cached: treat it as read-only. For BertForMaskedLM the encoder is ``ref.bert`` (with
    its pooler when the checkpoint has one). Needs torch and transformers (the ``live`` suite).
    """
    record = json.loads((Path(dir) / RECORD).read_text())
    return _build(json.dumps(record, sort_keys=True))


@lru_cache(maxsize=16)
def _build(record_json: str):
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertModel
    from transformers.models.bert.modeling_bert import BertPooler

    record = json.loads(record_json)
    config = BertConfig(**record["config"], position_embedding_type="absolute")
    config._attn_implementation = "eager"  # the textbook path; sdpa is compared on the real model
    if record["mlm_head"]:
        model = BertForMaskedLM(config)
        if record["pooler"]:  # saved as bert.pooler.* as in BertForPreTraining checkpoints
            model.bert.pooler = BertPooler(config)
    else:
        model = BertModel(config, add_pooling_layer=record["pooler"])
    state = {k: torch.from_numpy(v.copy()) for k, v in canonical_tensors(record_json).items()}
    model.load_state_dict(state, strict=True)
    return model.eval().float()


def record_tensors(dir: str | os.PathLike) -> dict[str, np.ndarray]:
    """canonical_tensors of the checkpoint in ``dir``, from its record (not from its weight files)."""
    record = json.loads((Path(dir) / RECORD).read_text())
    return canonical_tensors(json.dumps(record, sort_keys=True))


def n_parameters(dir: str | os.PathLike) -> int:
    """Parameter count of the checkpoint in ``dir`` as transformers counts it (tied tensors once), from its record."""
    record = json.loads((Path(dir) / RECORD).read_text())
    return sum(math.prod(shape) for shape in canonical_names(record["config"], record["mlm_head"], record["pooler"]).values())


def canonical_names(config: dict, mlm_head: bool, pooler: bool) -> dict[str, tuple[int, ...]]:
    """transformers' parameter names and shapes: BertModel's, or BertForMaskedLM's (``bert.`` prefix, the
    ``cls.predictions.*`` head with its decoder tied to the word embeddings) -> {name: shape}."""
    V, H, F = config["vocab_size"], config["hidden_size"], config["intermediate_size"]
    P, TV = config["max_position_embeddings"], config["type_vocab_size"]
    names = {"embeddings.word_embeddings.weight": (V, H), "embeddings.position_embeddings.weight": (P, H),
             "embeddings.token_type_embeddings.weight": (TV, H),
             "embeddings.LayerNorm.weight": (H,), "embeddings.LayerNorm.bias": (H,)}
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        for lin, (o, n) in {"attention.self.query": (H, H), "attention.self.key": (H, H),
                            "attention.self.value": (H, H), "attention.output.dense": (H, H),
                            "intermediate.dense": (F, H), "output.dense": (H, F)}.items():
            names[p + lin + ".weight"] = (o, n)  # (out, in) as torch.nn.Linear
            names[p + lin + ".bias"] = (o,)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            names[p + ln + ".weight"] = (H,)
            names[p + ln + ".bias"] = (H,)
    if pooler:
        names["pooler.dense.weight"], names["pooler.dense.bias"] = (H, H), (H,)
    if mlm_head:
        names = {"bert." + k: v for k, v in names.items()}
        names.update({"cls.predictions.bias": (V,), "cls.predictions.transform.dense.weight": (H, H),
                      "cls.predictions.transform.dense.bias": (H,),
                      "cls.predictions.transform.LayerNorm.weight": (H,),
                      "cls.predictions.transform.LayerNorm.bias": (H,)})
    return names


@lru_cache(maxsize=16)
def canonical_tensors(record_json: str) -> dict[str, np.ndarray]:
    """The checkpoint's float32 tensors under transformers' names, drawn with NumPy from the record's seed
    (see the module docstring). With the MLM head the tied ``cls.predictions.decoder.{weight,bias}`` are
    included (as transformers' state_dict has them): the word embeddings and ``cls.predictions.bias``.
    Cached: treat the arrays as read-only."""
    record = json.loads(record_json)
    rng = np.random.default_rng(record["seed"])
    out = {}
    for name, shape in sorted(canonical_names(record["config"], record["mlm_head"], record["pooler"]).items()):
        z = rng.standard_normal(shape)
        if name.endswith("LayerNorm.weight"):
            a = 1.0 + 0.1 * z
        elif name.endswith("bias"):
            a = 0.1 * z
        elif "embeddings" in name:
            a = 0.5 * z
        else:  # (out, in) linear weight
            a = z / math.sqrt(shape[1])
        out[name] = a.astype(np.float32)
    if record["mlm_head"]:
        out["cls.predictions.decoder.weight"] = out["bert.embeddings.word_embeddings.weight"]
        out["cls.predictions.decoder.bias"] = out["cls.predictions.bias"]
    return out


def torch_hidden_states(ref, input_ids, token_type_ids, attention_mask):
    """Run ``reference_model`` on NumPy (B, T) arrays -> (list of L+1 (B, T, H) arrays, pooled or None)."""
    import torch

    bert = ref.bert if hasattr(ref, "bert") else ref
    with torch.no_grad():
        out = bert(input_ids=torch.as_tensor(np.asarray(input_ids, dtype=np.int64)),
                   token_type_ids=torch.as_tensor(np.asarray(token_type_ids, dtype=np.int64)),
                   attention_mask=torch.as_tensor(np.asarray(attention_mask, dtype=np.int64)),
                   output_hidden_states=True)
    hidden = [h.numpy() for h in out.hidden_states]
    pooled = out.pooler_output.numpy() if getattr(out, "pooler_output", None) is not None else None
    return hidden, pooled


# --------------------------------------------------------------------------- caching and torch reference runs
_CACHE: dict[str, Path] = {}


def cached_checkpoint(root: str | os.PathLike, **kwargs) -> Path:
    """make_checkpoint(root / <hash of kwargs>, **kwargs), written once per process and kwargs."""
    import hashlib

    key = json.dumps([str(root), kwargs], sort_keys=True, default=str)
    if key not in _CACHE or not (_CACHE[key] / "config.json").is_file():
        name = hashlib.sha1(key.encode()).hexdigest()[:12]
        _CACHE[key] = make_checkpoint(Path(root) / name, **kwargs)
    return _CACHE[key]


try:
    import pytest

    @pytest.fixture(scope="session")
    def make_ckpt(tmp_path_factory):
        """Fixture: ``make_ckpt(**kwargs)`` -> a cached make_checkpoint directory (import it into a test module)."""
        root = tmp_path_factory.mktemp("ckpt")
        return lambda **kwargs: cached_checkpoint(root, **kwargs)
except ImportError:  # pragma: no cover
    pass


class RefRow:
    """One row of a torch reference run: real tokens only."""

    __slots__ = ("ids", "type_ids", "hidden", "pooled")

    def __init__(self, ids, type_ids, hidden, pooled):
        self.ids = ids  # (n,) int64
        self.type_ids = type_ids  # (n,) int64
        self.hidden = hidden  # list of L+1 (n, H) float32 arrays, index 0 = embeddings
        self.pooled = pooled  # (H,) or None


def hf_tokenizer(dir: str | os.PathLike):
    """transformers' (fast) BertTokenizer from a model directory."""
    from transformers import BertTokenizer

    return BertTokenizer.from_pretrained(str(dir))


def torch_reference_rows(model, hf_tok, texts, pairs=None, max_length=512, batch_size=32, on_batch=None):
    """Tokenize with transformers (padding=True, truncation=True, max_length) and run ``model`` in batches
    of ``batch_size`` rows in the given order -> list of RefRow (real tokens only).

    ``on_batch(input_ids, token_type_ids, attention_mask, hidden, pooled)`` is called per padded batch
    (NumPy arrays), so a test can run another implementation on exactly the same padded inputs.
    """
    rows = []
    with torch_threads(1):
        for s in range(0, len(texts), batch_size):
            enc = hf_tok(list(texts[s:s + batch_size]), None if pairs is None else list(pairs[s:s + batch_size]),
                         padding=True, truncation=True, max_length=max_length, return_tensors="np")
            ids, types, mask = enc["input_ids"], enc["token_type_ids"], enc["attention_mask"]
            hidden, pooled = torch_hidden_states(model, ids, types, mask)
            if on_batch is not None:
                on_batch(ids, types, mask, hidden, pooled)
            for r in range(len(ids)):
                n = int(mask[r].sum())
                rows.append(RefRow(ids[r, :n], types[r, :n], [h[r, :n] for h in hidden],
                                   None if pooled is None else pooled[r]))
    return rows


def single_blas_thread():
    """Context manager: NumPy's BLAS on one thread. In a process that has run torch, OpenBLAS's threads
    and torch's OpenMP threads fight over the 2 cores and a direct ``bert_forward`` call gets 10-30x slower
    (measured). ``Encoder.encode`` already runs BLAS on one thread per worker; tests that call the model
    directly should wrap it in this (or use an autouse fixture that does)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


class torch_threads:
    """Context manager: torch intra-op threads set to ``n`` and restored. One thread is the faster
    choice on a shared 2-core machine (torch's OpenMP threads spin when cores are oversubscribed)."""

    def __init__(self, n: int):
        self.n = n

    def __enter__(self):
        import torch

        self.old = torch.get_num_threads()
        torch.set_num_threads(self.n)

    def __exit__(self, *exc):
        import torch

        torch.set_num_threads(self.old)


def pool_rows(rows, pooling: str, layer: int = -1) -> np.ndarray:
    """Pool RefRows by hand: 'pooled' (the torch pooler output), 'cls', 'mean', 'max' of hidden state ``layer``."""
    if pooling == "pooled":
        return np.stack([r.pooled for r in rows])
    f = {"cls": lambda h: h[0], "mean": lambda h: h.astype(np.float64).mean(0), "max": lambda h: h.max(0)}[pooling]
    return np.stack([f(r.hidden[layer]) for r in rows]).astype(np.float32)


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of matching rows, in float64."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def precision_vs_fp32(model_dir, texts, precision: str, pooling: str = "mean") -> np.ndarray:
    """Row cosines of a model's ``precision`` features against its fp32 ones; skips, saying why, where this machine
    does not accelerate ``precision`` (bertfeat refuses it)."""
    import pytest

    from bertfeat.errors import BertfeatError
    from bertfeat.model.encoder import Encoder
    from bertfeat.ops import gemm

    try:
        gemm.resolve(precision)
    except BertfeatError as e:
        pytest.skip(f"{precision} not available here: {e.message}")
    a = Encoder(model_dir).encode(texts, pooling=pooling)
    return row_cosines(a, Encoder(model_dir, precision=precision).encode(texts, pooling=pooling))


def without_tensor(src: str | os.PathLike, name: str, dst: str | os.PathLike) -> Path:
    """A copy of checkpoint folder ``src`` at ``dst`` whose model.safetensors lacks tensor ``name``."""
    from safetensors.numpy import load_file, save_file

    dst = Path(dst)
    shutil.copytree(src, dst)
    t = load_file(str(dst / "model.safetensors"))
    del t[name]
    save_file(t, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


def expected_tokens(d, model_id, text, pair, max_length) -> dict:
    """What `tokenize_text` / `bertfeat tokens --json` must return, from transformers' BertTokenizerFast alone."""
    from transformers import BertTokenizerFast

    tok = BertTokenizerFast.from_pretrained(str(d))
    full = tok(text, pair)
    cut = tok(text, pair, truncation=True, max_length=max_length)
    return {
        "model": model_id, "text": text, "pair": pair, "max_length": max_length,
        "n_tokens": len(cut["input_ids"]), "n_tokens_full": len(full["input_ids"]),
        "truncated": len(full["input_ids"]) > max_length,
        "tokens": tok.convert_ids_to_tokens(cut["input_ids"]),
        "input_ids": cut["input_ids"], "token_type_ids": cut["token_type_ids"], "attention_mask": cut["attention_mask"],
    }


def write_bf16(path: str | os.PathLike) -> None:
    """Rewrite a safetensors file in bfloat16 (the top half of each float32; NaN stays NaN)."""
    import struct

    from safetensors.numpy import load_file

    header, blobs, off = {}, [], 0
    for k, v in load_file(str(path)).items():
        b = (np.ascontiguousarray(v, np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
        header[k] = {"dtype": "BF16", "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def refused(capsys, d, message: str, kind: type | None = None) -> None:
    """Encoder(d) raises ``kind`` (WeightsError unless given) with exactly ``message``, printing nothing, and
    `bertfeat info d` prints it as its one Error line, exit 1."""
    import pytest

    from bertfeat.cli.app import main
    from bertfeat.errors import WeightsError
    from bertfeat.model.encoder import Encoder

    with pytest.raises(kind or WeightsError) as e:
        Encoder(d)
    assert e.value.message == message
    assert main(["info", str(d)]) == 1
    assert capsys.readouterr() == ("", f"Error: {message}\n")
