"""Weight loading, in one place.

Reads the checkpoint once: safetensors (one file, or shards listed in model.safetensors.index.json; every header checked as
safetensors' own reader checks it, and every shard against the index, before a tensor is read: _read_header,
_check_shards), else, as transformers picks files, torch.save's pytorch_model.bin or its shards (torchfile.py:
never unpickled; the shards checked against pytorch_model.bin.index.json alike); maps checkpoint names through one table, fuses Q/K/V, transposes every linear weight
to (in, out) so the forward pass does ``x @ W``, and checks every key and shape, and that
every floating-point tensor is finite (a NaN or inf is refused with the tensor's name). Errors name a tensor as the
file spells it (Tensors.stored); a missing one says why when it can tell (_missing: a TensorFlow / Flax file, a wrapper's
prefix). A sentence-transformers module's own file (a Dense layer's weights) is read here too: read_module_file.

Name variants accepted for each tensor:
  * with or without the ``bert.`` / ``roberta.`` / ``camembert.`` / ``electra.`` / ``distilbert.`` prefix (BertModel
    vs BertFor* / RobertaFor* / ... checkpoints);
  * RoBERTa's masked-LM head ``lm_head.*`` mapped to BERT's ``cls.predictions.*`` names;
  * legacy LayerNorm names ``gamma`` / ``beta`` for ``weight`` / ``bias``.

Families (config.py): RoBERTa, XLM-RoBERTa and CamemBERT use BERT's tables; ELECTRA too, its embedding tables
``embedding_size`` wide and ``embeddings_project`` (_ELECTRA_PROJECT) when that differs from hidden_size; DistilBERT
has its own tables (_DISTILBERT_*: no token types, no pooler), mapped to the same LayerWeights (Q/K/V fused).

Tensors stored in float16 or bfloat16 are widened to float32 as they are read (exactly: bf16 is the top half of a
float32); safetensors' NumPy reader has no bfloat16, so such files are read by their format (_raw_safetensors).

``precision="bf16"`` stores the four linear weights of every layer (qkv_w, o_w, up_w, down_w) once,
at load, as bf16 bit patterns (uint16, rounded to nearest even from float32: gemm.to_bf16, saturating: a finite
weight beyond bf16's range becomes bf16's largest value, never infinity), the operands of the bf16 GEMM; embeddings,
LayerNorm, biases and the pooler stay float32.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .config import FAMILIES, ROBERTA_TYPES, BertConfig, model_file, typed
from ..errors import WeightsError, one_line, os_error
from ..ops.gemm import PRECISIONS, from_bf16, to_bf16
from .torchfile import check_finite, open_torch_file, read_torch_file

# One table: our name -> (checkpoint name, expected shape as a function of the config).
# {i} is the layer index.  "T" marks linear weights stored (out, in) that we transpose.
_EMB = {
    "word": ("embeddings.word_embeddings.weight", lambda c: (c.vocab_size, c.embedding_width)),
    "position": ("embeddings.position_embeddings.weight", lambda c: (c.max_position_embeddings, c.embedding_width)),
    "token_type": ("embeddings.token_type_embeddings.weight", lambda c: (c.type_vocab_size, c.embedding_width)),
    "ln_g": ("embeddings.LayerNorm.weight", lambda c: (c.embedding_width,)),
    "ln_b": ("embeddings.LayerNorm.bias", lambda c: (c.embedding_width,)),
}
_LAYER = {
    "q_w": ("encoder.layer.{i}.attention.self.query.weight", lambda c: (c.hidden_size, c.hidden_size)),
    "q_b": ("encoder.layer.{i}.attention.self.query.bias", lambda c: (c.hidden_size,)),
    "k_w": ("encoder.layer.{i}.attention.self.key.weight", lambda c: (c.hidden_size, c.hidden_size)),
    "k_b": ("encoder.layer.{i}.attention.self.key.bias", lambda c: (c.hidden_size,)),
    "v_w": ("encoder.layer.{i}.attention.self.value.weight", lambda c: (c.hidden_size, c.hidden_size)),
    "v_b": ("encoder.layer.{i}.attention.self.value.bias", lambda c: (c.hidden_size,)),
    "o_w": ("encoder.layer.{i}.attention.output.dense.weight", lambda c: (c.hidden_size, c.hidden_size)),
    "o_b": ("encoder.layer.{i}.attention.output.dense.bias", lambda c: (c.hidden_size,)),
    "ln1_g": ("encoder.layer.{i}.attention.output.LayerNorm.weight", lambda c: (c.hidden_size,)),
    "ln1_b": ("encoder.layer.{i}.attention.output.LayerNorm.bias", lambda c: (c.hidden_size,)),
    "up_w": ("encoder.layer.{i}.intermediate.dense.weight", lambda c: (c.intermediate_size, c.hidden_size)),
    "up_b": ("encoder.layer.{i}.intermediate.dense.bias", lambda c: (c.intermediate_size,)),
    "down_w": ("encoder.layer.{i}.output.dense.weight", lambda c: (c.hidden_size, c.intermediate_size)),
    "down_b": ("encoder.layer.{i}.output.dense.bias", lambda c: (c.hidden_size,)),
    "ln2_g": ("encoder.layer.{i}.output.LayerNorm.weight", lambda c: (c.hidden_size,)),
    "ln2_b": ("encoder.layer.{i}.output.LayerNorm.bias", lambda c: (c.hidden_size,)),
}
_POOLER = {
    "w": ("pooler.dense.weight", lambda c: (c.hidden_size, c.hidden_size)),
    "b": ("pooler.dense.bias", lambda c: (c.hidden_size,)),
}
# Masked-language-model head (BertForMaskedLM / BertForPreTraining); never under "bert.".
_MLM = {
    "dense_w": ("cls.predictions.transform.dense.weight", lambda c: (c.hidden_size, c.hidden_size)),
    "dense_b": ("cls.predictions.transform.dense.bias", lambda c: (c.hidden_size,)),
    "ln_g": ("cls.predictions.transform.LayerNorm.weight", lambda c: (c.hidden_size,)),
    "ln_b": ("cls.predictions.transform.LayerNorm.bias", lambda c: (c.hidden_size,)),
    "bias": ("cls.predictions.bias", lambda c: (c.vocab_size,)),
}
_MLM_DECODER = ("cls.predictions.decoder.weight", lambda c: (c.vocab_size, c.hidden_size))


class Tensors(dict):
    """read_tensors' dict (canonical name -> array) with ``stored``: each canonical name as the checkpoint spells it
    ('lm_head.bias' for 'cls.predictions.bias', 'bert.embeddings.LayerNorm.gamma' ...), which errors name."""

    def __init__(self, files: list[Path] = ()):
        super().__init__()
        self.stored: dict[str, str] = {}
        self.files = list(files)  # the safetensors files read
        self.formats: dict[Path, str] = {}  # file -> its metadata's "format" ("pt", "tf", "flax"), where it says one

    def shown(self, name: str) -> str:
        return self.stored.get(name, name)


def read_unprefixed(model_dir: Path, prefix: str) -> tuple[dict[str, np.ndarray], list[Path], Path]:
    """A family's checkpoint read once (read_tensors), its task-model ``prefix`` (``mpnet.``, ``model.``) taken off
    every name; a tensor saved both with and without it is refused: -> (tensors, the files, where: the file or the
    folder, for messages)."""
    files = checkpoint_files(model_dir)
    tensors = Tensors(files)
    read = read_tensors(files)
    for k, t in read.items():
        name = k[len(prefix):] if k.startswith(prefix) else k
        if name in tensors:
            raise WeightsError(f"{model_dir}: tensor '{name}' appears twice (with and without '{prefix}')",
                               "remove the duplicate from the checkpoint")
        tensors[name] = t
        tensors.stored[name] = read.shown(k)
    tensors.formats = read.formats
    return tensors, files, files[0] if len(files) == 1 else model_dir


# BERT's tables by public names, for families whose tensors are BERT's under other names (mpnet.py)
LAYER_TABLE, POOLER_TABLE, MLM_TABLE, MLM_DECODER = _LAYER, _POOLER, _MLM, _MLM_DECODER

# ELECTRA (ElectraModel): BERT's tables, the embeddings embedding_size (E) wide, then a Linear E -> H when E != H.
_ELECTRA_PROJECT = {
    "w": ("embeddings_project.weight", lambda c: (c.hidden_size, c.embedding_width)),
    "b": ("embeddings_project.bias", lambda c: (c.hidden_size,)),
}

# DistilBERT (DistilBertModel / DistilBertForMaskedLM): LN(word + position), no token types, no pooler.
_DISTILBERT_EMB = {k: v for k, v in _EMB.items() if k != "token_type"}
_DISTILBERT_LAYER = {
    "q_w": ("transformer.layer.{i}.attention.q_lin.weight", lambda c: (c.hidden_size, c.hidden_size)),
    "q_b": ("transformer.layer.{i}.attention.q_lin.bias", lambda c: (c.hidden_size,)),
    "k_w": ("transformer.layer.{i}.attention.k_lin.weight", lambda c: (c.hidden_size, c.hidden_size)),
    "k_b": ("transformer.layer.{i}.attention.k_lin.bias", lambda c: (c.hidden_size,)),
    "v_w": ("transformer.layer.{i}.attention.v_lin.weight", lambda c: (c.hidden_size, c.hidden_size)),
    "v_b": ("transformer.layer.{i}.attention.v_lin.bias", lambda c: (c.hidden_size,)),
    "o_w": ("transformer.layer.{i}.attention.out_lin.weight", lambda c: (c.hidden_size, c.hidden_size)),
    "o_b": ("transformer.layer.{i}.attention.out_lin.bias", lambda c: (c.hidden_size,)),
    "ln1_g": ("transformer.layer.{i}.sa_layer_norm.weight", lambda c: (c.hidden_size,)),
    "ln1_b": ("transformer.layer.{i}.sa_layer_norm.bias", lambda c: (c.hidden_size,)),
    "up_w": ("transformer.layer.{i}.ffn.lin1.weight", lambda c: (c.intermediate_size, c.hidden_size)),
    "up_b": ("transformer.layer.{i}.ffn.lin1.bias", lambda c: (c.intermediate_size,)),
    "down_w": ("transformer.layer.{i}.ffn.lin2.weight", lambda c: (c.hidden_size, c.intermediate_size)),
    "down_b": ("transformer.layer.{i}.ffn.lin2.bias", lambda c: (c.hidden_size,)),
    "ln2_g": ("transformer.layer.{i}.output_layer_norm.weight", lambda c: (c.hidden_size,)),
    "ln2_b": ("transformer.layer.{i}.output_layer_norm.bias", lambda c: (c.hidden_size,)),
}
_DISTILBERT_MLM = {  # DistilBertForMaskedLM: vocab_transform, activation, vocab_layer_norm, vocab_projector (tied)
    "dense_w": ("vocab_transform.weight", lambda c: (c.hidden_size, c.hidden_size)),
    "dense_b": ("vocab_transform.bias", lambda c: (c.hidden_size,)),
    "ln_g": ("vocab_layer_norm.weight", lambda c: (c.hidden_size,)),
    "ln_b": ("vocab_layer_norm.bias", lambda c: (c.hidden_size,)),
    "bias": ("vocab_projector.bias", lambda c: (c.vocab_size,)),
}
_DISTILBERT_DECODER = ("vocab_projector.weight", lambda c: (c.vocab_size, c.hidden_size))


def name_tables(c: BertConfig) -> tuple[dict, dict, dict, tuple]:
    """The family's (embeddings, layer, masked-LM head, MLM decoder) tables."""
    if c.model_type == "distilbert":
        return _DISTILBERT_EMB, _DISTILBERT_LAYER, _DISTILBERT_MLM, _DISTILBERT_DECODER
    return _EMB, _LAYER, _MLM, _MLM_DECODER


# Nothing in a checkpoint is ignored silently (as nanoGPT's from_pretrained): a tensor the tables above do not
# take is either allowed here, listed in BertWeights.ignored, or refused with its name.
ALLOWED_UNUSED = {
    "embeddings.position_ids": "a buffer (0, 1, ..., P-1) older transformers versions saved",
    "embeddings.token_type_ids": "a buffer of zeros some transformers versions saved",
    "cls.predictions.decoder.bias": "the masked-LM decoder's bias (used by fill-mask when the head is complete)",
}
OTHER_HEADS = ("cls.seq_relationship.", "cls.predictions.", "classifier.", "qa_outputs.",  # other tasks' heads
               "discriminator_predictions.", "generator_predictions.", "generator_lm_head.",  # ELECTRA's
               "pre_classifier.", "vocab_transform.", "vocab_layer_norm.", "vocab_projector.")  # DistilBERT's


@dataclass
class LayerWeights:
    # the four linear weights: float32, or uint16 bf16 bit patterns when the checkpoint was loaded in bf16
    qkv_w: np.ndarray  # (H, 3H): [Wq | Wk | Wv], transposed
    qkv_b: np.ndarray  # (3H,)
    o_w: np.ndarray  # (H, H)
    o_b: np.ndarray
    ln1_g: np.ndarray
    ln1_b: np.ndarray
    up_w: np.ndarray  # (H, F)
    up_b: np.ndarray  # (F,)
    down_w: np.ndarray  # (F, H)
    down_b: np.ndarray
    ln2_g: np.ndarray
    ln2_b: np.ndarray


@dataclass
class BertWeights:
    config: BertConfig
    word: np.ndarray  # (V, H)
    position: np.ndarray  # (P, H)
    token_type: np.ndarray | None  # (TV, H); None for DistilBERT (no token types)
    emb_ln_g: np.ndarray
    emb_ln_b: np.ndarray
    layers: list[LayerWeights]
    pooler_w: np.ndarray | None = None  # (H, H) transposed
    pooler_b: np.ndarray | None = None
    mlm: dict | None = None  # dense_w (H,H) transposed, dense_b, ln_g, ln_b, bias (V,)
    files: list[Path] = field(default_factory=list)
    missing_pooler_reason: str | None = None
    missing_mlm_reason: str | None = None  # a masked-LM head that is there but not run (untied_decoder_missing)
    precision: str = "fp32"  # "bf16": the layers' linear weights are bf16 (uint16) for gemm.matmul
    ignored: list[str] = field(default_factory=list)  # other tasks' head tensors in the file, not used
    emb_proj_w: np.ndarray | None = None  # ELECTRA's embeddings_project (E, H) transposed, float32 (as the pooler)
    emb_proj_b: np.ndarray | None = None  # (H,)
    steps: object = None  # the layer steps of its precision (bert.layer_steps), chosen once

    @property
    def n_params(self) -> int:
        arrays = [a for a in (self.word, self.position, self.token_type, self.emb_ln_g, self.emb_ln_b,
                              self.emb_proj_w, self.emb_proj_b) if a is not None]
        for lw in self.layers:
            arrays += list(vars(lw).values())
        if self.pooler_w is not None:
            arrays += [self.pooler_w, self.pooler_b]
        return int(sum(a.size for a in arrays))

    def nbytes(self) -> int:
        total = sum(a.nbytes for a in (self.word, self.position, self.token_type) if a is not None)
        for lw in self.layers:
            total += sum(a.nbytes for a in vars(lw).values())
        return total


INDEX = "model.safetensors.index.json"
BIN, BIN_INDEX = "pytorch_model.bin", "pytorch_model.bin.index.json"  # torch.save's, as transformers names them


def checkpoint_files(model_dir: Path) -> list[Path]:
    """The weight files of a model directory, picked as transformers' from_pretrained picks them (safetensors
    first): model.safetensors, else the shards of model.safetensors.index.json, else pytorch_model.bin, else the
    shards of pytorch_model.bin.index.json (torch.save's files, read without unpickling: torchfile.py), else
    (bertfeat's own, where transformers finds no weights) every *.safetensors file, shards without their index. Last,
    so that a stray .safetensors (an adapter's, another save's shard) never stands in for the pytorch_model.bin
    transformers reads."""
    for single, index in (("model.safetensors", INDEX), (BIN, BIN_INDEX)):
        files = _indexed(model_dir, single, index)
        if files:
            return files
    others = sorted(f for f in model_dir.glob("*.safetensors") if model_file(f))
    if others:
        _check_unindexed_shards(model_dir, others)
        return others
    bins = sorted(f.name for f in model_dir.glob("pytorch_model-*.bin"))
    hint = f" (found {', '.join(bins[:3])}{' ...' if len(bins) > 3 else ''} without {BIN_INDEX})" if bins else ""
    raise WeightsError(
        f"{model_dir} has no model.safetensors or {BIN}{hint}",
        "a model directory needs model.safetensors (or sharded model-*.safetensors with model.safetensors.index.json)"
        f", or {BIN} (or sharded pytorch_model-*.bin with {BIN_INDEX})",
    )


def _indexed(model_dir: Path, single: str, index: str) -> list[Path]:
    """[the file ``single``], else the shards ``index`` lists (each there), else []."""
    if model_file(model_dir / single):  # each file checked as a model file: a named pipe is refused, never opened
        return [model_dir / single]
    weight_map = _weight_map(model_dir, index, single)
    if weight_map is None:
        return []
    files = [model_dir / f for f in dict.fromkeys(weight_map.values())]
    missing = [f.name for f in files if not model_file(f)]
    if missing:
        raise WeightsError(
            f"{model_dir}: shard(s) {', '.join(missing)} listed in {index} are missing",
            f"copy every {single.replace('.', '-*.', 1)} shard into the model directory",
        )
    return files


def checkpoint_index(files: list[Path]) -> Path | None:
    """The index that lists ``files`` (checkpoint_files' answer) when they are shards, else None."""
    if not files or len(files) == 1 and files[0].name in ("model.safetensors", BIN):
        return None
    d = files[0].parent
    for name in (INDEX, BIN_INDEX):  # the one checkpoint_files read (safetensors' first), whatever its shards' kind
        if model_file(d / name):
            return d / name
    return d / (BIN_INDEX if files[0].suffix == ".bin" else INDEX)  # (shards without their index: not there)


_SHARD_NAME = re.compile(r"model-(\d+)-of-(\d+)\.safetensors")


def _check_unindexed_shards(model_dir: Path, files: list[Path]) -> None:
    """Shards without their index (model-0000k-of-0000n.safetensors): every one of the n is there, else the missing
    are named (one missing would otherwise show as a missing tensor, blamed on config.json)."""
    names = {f.name for f in files}
    sets = {(len(m.group(1)), m.group(2)) for m in map(_SHARD_NAME.fullmatch, names) if m}
    for width, n in sorted(sets):
        have = sum(1 for k in names if (m := _SHARD_NAME.fullmatch(k)) and (len(m.group(1)), m.group(2)) == (width, n)
                   and 1 <= int(m.group(1)) <= int(n))
        if have == int(n):
            continue
        shown = []
        for k in range(1, int(n) + 1):  # the first few missing (n may be absurd: stop early)
            if (want := f"model-{k:0{width}d}-of-{n}.safetensors") not in names:
                shown.append(want)
                if len(shown) == 3:
                    break
        more = int(n) - have - len(shown)
        raise WeightsError(f"{model_dir}: {int(n) - have:,} of {int(n):,} shards are missing ({', '.join(shown)}"
                           f"{f' and {more:,} more' if more > 0 else ''}), and {INDEX}, which lists them, is missing too",
                           f"copy every model-*.safetensors shard and {INDEX} into the model directory")


_INDEX_FIX = "restore it from the checkpoint"


def _weight_map(model_dir: Path, name: str = INDEX, single: str = "model.safetensors") -> dict[str, str] | None:
    """The weight_map (tensor name -> shard file name) of the index ``name`` when the checkpoint is sharded (no
    ``single`` file, the index beside), else None. Checked as safetensors' own readers would: an object of names to
    plain file names in the folder, each name once."""
    index = model_dir / name
    if model_file(model_dir / single) or not model_file(index):
        return None
    try:
        weight_map = typed(_loads_unique(index.read_bytes().decode("utf-8")), dict, str(index))["weight_map"]
    except _Repeated as e:  # json.loads would keep the last shard of a tensor listed twice
        raise WeightsError(f"{index} names '{e.key}' twice (a tensor listed twice in weight_map?)", _INDEX_FIX) from None
    except (KeyError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise WeightsError(f"{index} is not a valid {'safetensors' if name == INDEX else 'checkpoint'} index ({e})",
                           _INDEX_FIX) from None
    typed(weight_map, dict, f"{index}: weight_map")
    for tensor, shard in weight_map.items():
        typed(shard, str, f"{index}: a weight_map entry")
        if shard in ("", ".", "..") or Path(shard).name != shard or "\\" in shard:
            raise WeightsError(f"{index}: weight_map maps tensor '{tensor}' to {shard!r}, which is not a file name in "
                               f"{model_dir}", _INDEX_FIX)
        _check_shard_kind(index, tensor, shard)
    if not weight_map:
        raise WeightsError(f"{index}: weight_map lists no tensor", _INDEX_FIX)
    return weight_map


def _check_shard_kind(index: Path, tensor: str, shard: str) -> None:
    """A shard bertfeat can read: a .safetensors file or torch.save's .bin, under either index, as transformers reads
    each shard by its own extension whatever the index's name. Another (a .pt) was read as safetensors."""
    if shard.endswith((".safetensors", ".bin")):
        return
    raise WeightsError(f"{index}: weight_map maps tensor '{tensor}' to '{shard}', which is neither a .safetensors nor a "
                       ".bin file", "bertfeat reads safetensors shards (.safetensors) and torch.save's (.bin): save the "
                       "checkpoint again with save_pretrained")


def _check_shards(model_dir: Path, weight_map: dict[str, str], held: dict[str, list[str]], index_name: str = INDEX) -> None:
    """The shards hold what the index ``index_name`` says (``held``: shard file name -> its tensor names): each tensor in
    the one shard the index maps it to, and nothing else. A shard from another save of the model would otherwise mix
    weights."""
    index = model_dir / index_name
    where: dict[str, list[str]] = {}
    for shard, names in held.items():
        for name in names:
            where.setdefault(name, []).append(shard)
    for name, shards in where.items():
        if len(shards) > 1:
            raise _invalid_shards(index, f"tensor '{name}' is in {len(shards)} shards ({', '.join(shards)})")
        if name not in weight_map:
            raise _invalid_shards(index, f"shard {shards[0]} holds tensor '{name}', which {index_name} does not list")
        if weight_map[name] != shards[0]:
            raise _invalid_shards(index, f"{index_name} maps tensor '{name}' to {weight_map[name]}, but it is in {shards[0]}")
    for name, shard in weight_map.items():
        if name not in where:
            raise _invalid_shards(index, f"{index_name} maps tensor '{name}' to {shard}, which does not hold it")


def _invalid_shards(index: Path, problem: str) -> WeightsError:
    return WeightsError(f"{index.parent}: the shards do not match their index: {problem}",
                        "the shards and the index come from different saves or were edited: download the checkpoint "
                        f"again (every shard and {index.name})")


#: the linear weights of the encoder layers, stored in bf16 under precision="bf16" (canonical names)
_LAYER_LINEAR = re.compile(r"encoder\.layer\.\d+\.(attention\.self\.(query|key|value)|attention\.output\.dense"
                           r"|intermediate\.dense|output\.dense)\.weight"
                           r"|transformer\.layer\.\d+\.(attention\.(q|k|v|out)_lin|ffn\.lin[12])\.weight")  # DistilBERT


#: a task model's prefix -> the model types whose checkpoints carry it: under another model_type the prefix says
#: the weights are another family's (RoBERTa's under "bert" would read positions from 0: every vector wrong)
FAMILY_PREFIXES = {"bert.": ("bert",), "roberta.": ROBERTA_TYPES, "camembert.": ROBERTA_TYPES, "electra.": ("electra",),
                   "distilbert.": ("distilbert",)}


def check_prefix(key: str, model_type: str, where: Path) -> None:
    """Refuse a tensor whose task-model prefix belongs to another family than config.json's model_type."""
    for prefix, types in FAMILY_PREFIXES.items():
        if key.startswith(prefix) and model_type not in types:
            raise WeightsError(f"{where}: tensor '{key}' is named as in a {FAMILIES.get(types[0], types[0])} checkpoint, "
                               f"but config.json says model_type '{model_type}'",
                               f"use the config.json that came with these weights (model_type '{types[0]}')")


def read_tensors(files: list[Path], bf16: set[str] | None = None, model_type: str | None = None) -> Tensors:
    """Every tensor of the checkpoint, read once, with canonical names.

    Canonical: no ``bert.`` prefix, LayerNorm ``gamma``/``beta`` renamed ``weight``/``bias``. With ``model_type``, a
    prefix of another family is refused (check_prefix).
    With a set ``bf16``: the encoder layers' floating-point linear weights are rounded to bf16 as they
    are read (their float32 copy never outlives its own read), and their names are added to the set;
    a bf16 load then peaks below a float32 one (see docs/precision.md).
    """
    opened = [_guarded(f, _open_weights, f) for f in files]  # every header checked before any tensor is read
    index = checkpoint_index(files)
    weight_map = _weight_map(index.parent, index.name, BIN if index.name == BIN_INDEX else "model.safetensors") \
        if index is not None else None
    if weight_map is not None:
        _check_shards(index.parent, weight_map, {f.name: keys for f, (keys, _, _, _) in zip(files, opened)},
                      index.name)
    out = Tensors(files)
    out.formats = {f: fmt for f, (_, _, _, fmt) in zip(files, opened) if fmt is not None}
    stored_as: dict[str, str] = {}  # canonical name -> the key it was stored under
    for f, (keys, get, stored16, _) in zip(files, opened):
        for key in keys:
            if model_type is not None:
                check_prefix(key, model_type, f)
            name = canonical_name(key)
            if name in out:
                raise WeightsError(f"{f}: tensor '{name}' appears twice, as '{stored_as[name]}' and as '{key}'",
                                   "remove one of them from the checkpoint")
            stored_as[name] = key
            to16 = bf16 is not None and _LAYER_LINEAR.fullmatch(name)
            if to16 and key in stored16:  # stored in bf16: its bit patterns as they are, no round trip
                t = _guarded(f, get, key, bits=True)
                check_finite(t, key, f, bf16_bits=True)
                bf16.add(name)
            else:
                t = _guarded(f, get, key)
                check_finite(t, key, f)  # the file's own values (before any rounding to bf16)
                if to16 and t.dtype.kind == "f":
                    t = to_bf16(t, saturate=True)
                    bf16.add(name)
            out[name] = t
            out.stored[name] = key
    return out


def _guarded(f: Path, fn, *args, **kwargs):
    """``fn(*args)``, any error but bertfeat's own (an unreadable file) a WeightsError naming ``f``."""
    try:
        return fn(*args, **kwargs)
    except WeightsError:
        raise
    except PermissionError as e:  # the file may be fine, its access is not: not "re-download it"
        err = os_error(e, f)
        raise WeightsError(err.what, err.fix) from None
    except Exception as e:
        raise _unreadable(f, one_line(e)) from None


def _open_weights(f: Path):
    """(tensor names, get(name, bits=False), names stored in bf16, format or None) of a safetensors file, or of a
    torch.save one (.bin: torchfile.open_torch_file, never unpickled; no format)."""
    if f.suffix == ".bin":
        return (*open_torch_file(f), None)
    return _open_safetensors(f)


def _open_safetensors(f: Path):
    """(tensor names, get(name) -> NumPy array, names of the tensors stored in bf16, its metadata's "format" or None)
    for one safetensors file.

    The file is read by its format (safetensors' own reader memory-maps it: every page it touches counts in the
    process's resident memory until the file is closed, so a load peaked at twice the weights: a ModernBERT-base
    shape, 568 MiB of weights, 1,172 MB peak RSS; read into each tensor's own array, 1x plus one tensor). BF16
    tensors (checkpoints saved with torch_dtype=bfloat16; NumPy has no bfloat16) are widened exactly to float32 (a
    bf16 value is the upper half of a float32) or, with ``get(name, bits=True)`` (the layers' linear weights under
    precision="bf16"), kept as their bf16 bit patterns with no round trip."""
    keys, get, header, fmt = _raw_safetensors(f)
    return keys, get, {k for k in keys if header[k]["dtype"] == "BF16"}, fmt


_RAW_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64, "I32": np.int32,
               "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_, "BF16": np.uint16}
_HEADER_MAX = 100_000_000  # safetensors' own limit on the JSON header (MAX_HEADER_SIZE)


def _unreadable(f: Path, why: str) -> WeightsError:
    kind = "a torch.save checkpoint" if f.suffix == ".bin" else "safetensors"
    return WeightsError(f"{f} could not be read as {kind} ({why})", "re-download or re-save the checkpoint")


def _invalid(f: Path, problem: str) -> WeightsError:
    """A header that parses but lies about the data (the checks of safetensors' own reader, which refuses it)."""
    return WeightsError(f"{f} is not a valid safetensors file: {problem}",
                        "the file is damaged or was not written by a safetensors writer (safetensors' own reader "
                        "refuses it too): re-download or re-save the checkpoint")


class _Repeated(ValueError):
    """A JSON object gives ``key`` twice (json.loads would keep its last value silently); ``outermost``: in the
    document's own object (a safetensors header's tensor names), not in one nested in it."""

    def __init__(self, key: str, outermost: bool):
        super().__init__(f"the key {key!r} appears twice in one object")
        self.key, self.outermost = key, outermost


def _loads_unique(text: str):
    """json.loads, refusing a key given twice in one object (_Repeated: the outermost such key, e.g. a tensor's name
    before a field of its entry)."""
    repeated: list[tuple[int, str]] = []  # (which object, counted as they close: the document's own is the last)
    closed = 0

    def unique(pairs: list) -> dict:
        nonlocal closed
        closed += 1
        repeated.extend((closed, k) for k, n in Counter(k for k, _ in pairs).items() if n > 1)
        return dict(pairs)

    doc = json.loads(text, object_pairs_hook=unique)
    if repeated:
        which, key = repeated[-1]  # objects close inside out: the last repeat is the outermost
        raise _Repeated(key, which == closed)
    return doc


def _read_header(f: Path) -> tuple[dict, int, str | None]:
    """A safetensors file's JSON header, checked as safetensors' reader checks it (``Metadata.validate``): ->
    (tensor name -> entry, the byte where the data starts, its __metadata__'s "format" or None)."""
    size = f.stat().st_size
    with open(f, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise _unreadable(f, f"it is {size} bytes, shorter than the 8-byte header length")
        n = int.from_bytes(head, "little")
        if not 0 < n <= _HEADER_MAX:
            raise _unreadable(f, f"its header length is {n:,} bytes (safetensors reads 1 to {_HEADER_MAX:,})")
        if n > size - 8:
            raise _unreadable(f, f"its header length is {n:,} bytes, but the file has {size - 8:,} after it: "
                                 "the file is truncated")
        raw = fh.read(n)
    try:
        header = _loads_unique(raw.decode("utf-8"))
    except _Repeated as e:
        raise _invalid(f, f"its header names tensor '{e.key}' twice" if e.outermost
                       else f"its header gives '{e.key}' twice in one tensor's entry") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _unreadable(f, f"its header is not JSON text: {one_line(e)}") from None
    if not isinstance(header, dict):
        raise _unreadable(f, "its header is not a JSON object")
    meta = header.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise _invalid(f, "its __metadata__ is not an object of strings")
    for key, h in header.items():
        _check_entry(f, key, h)
    _check_layout(f, header, size - 8 - n)
    return header, 8 + n, (meta or {}).get("format")


def _whole(v, length: int | None = None) -> bool:
    """``v`` is a JSON list (of ``length``) of whole numbers >= 0, as safetensors' usize fields."""
    return isinstance(v, list) and (length is None or len(v) == length) and all(
        isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v)


def _check_entry(f: Path, key: str, h) -> None:
    """One tensor's entry: a dtype bertfeat reads, a shape and two offsets of whole numbers, as many bytes between
    the offsets as dtype x shape need."""
    if not isinstance(h, dict) or not {"dtype", "shape", "data_offsets"} <= set(h):
        raise _invalid(f, f"tensor '{key}' has no dtype, shape or data_offsets")
    dtype, shape, offsets = h["dtype"], h["shape"], h["data_offsets"]
    if not isinstance(dtype, str) or dtype not in _RAW_DTYPES:
        shown = dtype if isinstance(dtype, str) else json.dumps(dtype)
        raise WeightsError(f"{f}: tensor '{key}' has dtype {one_line(shown, 60)}, which bertfeat cannot read",
                           "re-save the checkpoint in float32 or bfloat16")
    if not _whole(shape):
        raise _invalid(f, f"tensor '{key}' has shape {one_line(json.dumps(shape), 60)}, not a list of whole numbers")
    if not _whole(offsets, 2) or offsets[1] < offsets[0]:
        raise _invalid(f, f"tensor '{key}' has data_offsets {one_line(json.dumps(offsets), 60)}, not [start, end] "
                          "with 0 <= start <= end")
    need = math.prod(shape) * np.dtype(_RAW_DTYPES[dtype]).itemsize
    if offsets[1] - offsets[0] != need:
        raise _invalid(f, f"tensor '{key}' spans {offsets[1] - offsets[0]:,} bytes (data_offsets {offsets}), but its "
                          f"dtype {dtype} and shape {shape} need {need:,}")


def _check_layout(f: Path, header: dict, data: int) -> None:
    """The tensors tile the data exactly, in offset order: none past its end, none sharing a byte with another (two
    names reading the same weights), no bytes between them or after the last that belong to no tensor."""
    at, last = 0, None
    for key, h in sorted(header.items(), key=lambda kv: tuple(kv[1]["data_offsets"])):
        start, end = h["data_offsets"]
        span = f"bytes {start:,}..{end:,}"
        if end > data:
            raise _invalid(f, f"tensor '{key}' ({span} of the data) lies past the end of the file's {data:,} bytes of "
                              "data: the file is truncated")
        if start < at:
            raise _invalid(f, f"tensors '{last}' and '{key}' overlap: their data_offsets share bytes {start:,}.."
                              f"{min(at, end):,} of the data")
        if start > at:
            after = f"between tensors '{last}' and '{key}'" if last else f"before the first tensor '{key}'"
            raise _invalid(f, f"bytes {at:,}..{start:,} of the data, {after}, belong to no tensor")
        at, last = end, key
    if at < data:
        raise _invalid(f, f"the last {data - at:,} bytes of the data" + (f", after tensor '{last}'," if last else "")
                          + " belong to no tensor")


def _raw_safetensors(f: Path):
    """Read a safetensors file by its format (8-byte little-endian header length, JSON header, raw little-endian
    data): -> (names, get(name, bits=False), header, its metadata's "format" or None). The header is checked whole before anything is read
    (_read_header: a truncated, foreign or lying file is a WeightsError naming it and the tensor); ``get`` reads one
    tensor with ``readinto`` into its own array."""
    header, base, fmt = _read_header(f)

    def get(key: str, bits: bool = False) -> np.ndarray:
        """The tensor ``key``; a BF16 one widened to float32, or with ``bits`` as its uint16 bit patterns."""
        h = header[key]
        start, end = h["data_offsets"]
        a = np.empty(int(np.prod(h["shape"], dtype=np.int64)), dtype=np.dtype(_RAW_DTYPES[h["dtype"]]).newbyteorder("<"))
        with open(f, "rb") as fh:
            fh.seek(base + start)
            if fh.readinto(memoryview(a).cast("B")) != end - start:
                raise _unreadable(f, f"tensor '{key}' could not be read whole: the file is truncated")
        a = a.astype(a.dtype.newbyteorder("="), copy=False)
        if h["dtype"] == "BF16" and not bits:
            a = from_bf16(a)
        return a.reshape(h["shape"])

    return list(header), get, header, fmt


def read_module_file(f: Path) -> dict[str, np.ndarray]:
    """Every tensor of a sentence-transformers module's weights file by its own name, float32 (float16 and bfloat16
    widened exactly), each finite: a safetensors file, or a torch.save one (.bin: torchfile.read_torch_file, never
    unpickled). The encoder's files are read by read_tensors (_open_weights); both dispatch on the suffix here."""
    if f.suffix == ".bin":
        return read_torch_file(f)
    return read_safetensors_file(f)


def read_safetensors_file(f: Path) -> dict[str, np.ndarray]:
    """Every tensor of one safetensors file under its own name, each checked finite, BF16 / F16 widened exactly to
    float32 (a sentence-transformers Dense module saved with the model in bfloat16). A WeightsError names the file."""
    keys, get, _, _ = _guarded(f, _raw_safetensors, f)
    out = {}
    for k in keys:
        t = _guarded(f, get, k)
        check_finite(t, k, f)
        out[k] = t.astype(np.float32) if t.dtype == np.float16 else t
    return out


# RobertaLMHead -> BERT's masked-LM head names (same maths: dense, act, LayerNorm, tied decoder, bias).
_LM_HEAD_NAMES = {
    "lm_head.dense.": "cls.predictions.transform.dense.",
    "lm_head.layer_norm.": "cls.predictions.transform.LayerNorm.",
    "lm_head.decoder.weight": "cls.predictions.decoder.weight",
    "lm_head.decoder.bias": "cls.predictions.decoder.bias",
    "lm_head.bias": "cls.predictions.bias",
}


def canonical_name(key: str) -> str:
    for prefix in FAMILY_PREFIXES:
        if key.startswith(prefix):
            key = key[len(prefix):]
            break
    for old, new in _LM_HEAD_NAMES.items():
        if key.startswith(old):
            key = new + key[len(old):]
            break
    if key.endswith(".gamma"):
        key = key[: -len(".gamma")] + ".weight"
    elif key.endswith(".beta"):
        key = key[: -len(".beta")] + ".bias"
    return key


def _take(tensors: dict, name: str, shape: tuple, where: Path, used: set | None = None,
          bf16: set[str] = frozenset()) -> np.ndarray:
    if used is not None:
        used.add(name)
    if name not in tensors:
        raise _missing(tensors, name, shape, where)
    t = tensors[name]
    shown = tensors.shown(name) if isinstance(tensors, Tensors) else name  # as the file spells it
    if tuple(t.shape) != tuple(shape):
        raise WeightsError(
            f"{where}: tensor '{shown}' has shape {tuple(t.shape)}, expected {tuple(shape)} from config.json",
            "the checkpoint does not match config.json; use the config.json that came with these weights",
        )
    if name in bf16:  # rounded to bf16 by read_tensors
        return np.ascontiguousarray(t)
    if t.dtype.kind != "f":
        raise WeightsError(f"{where}: tensor '{shown}' has dtype {t.dtype}, expected floating point", "re-save the checkpoint in float32")
    return np.ascontiguousarray(t, dtype=np.float32)


def _missing(tensors: dict, name: str, shape: tuple, where: Path) -> WeightsError:
    """The error of a tensor ``name`` the checkpoint lacks: saved by TensorFlow / Flax (their names, none PyTorch's),
    under a wrapper's prefix (Lightning's model., ...), or simply missing (then config.json does not match)."""
    foreign = None
    if isinstance(tensors, Tensors) and any(k.endswith(_FOREIGN_ENDS) for k in tensors.stored.values()):
        foreign = next(((fmt, f) for f, fmt in tensors.formats.items() if fmt in _FOREIGN), None)  # read at load
    if foreign is not None:
        fmt, f = foreign
        return WeightsError(f"{where}: tensor '{name}' is missing: {f.name} was saved by {_FOREIGN[fmt]} (its metadata "
                            f"says format '{fmt}'), whose tensor names and layouts are not PyTorch's",
                            "convert it to a PyTorch checkpoint where transformers 4 is installed (which reads such a "
                            f"file as {_FOREIGN[fmt]}'s; transformers 5 does not): "
                            "AutoModel.from_pretrained(DIR).save_pretrained(NEW_DIR)")
    held = next((k for k in tensors if k.endswith(("." + name, "/" + name))), None)
    if held is not None:
        prefix = held[: -len(name)]
        return WeightsError(f"{where}: tensor '{name}' is missing; the checkpoint has it as '{held}', under a prefix "
                            f"bertfeat does not take ('{prefix}')",
                            "save the encoder itself with transformers' save_pretrained (not a module that holds it), "
                            f"or rename its tensors without '{prefix}'")
    return WeightsError(f"{where}: tensor '{name}' is missing (expected shape {shape})",
                        "the checkpoint does not match config.json; use the config.json that came with these weights")


_FOREIGN = {"tf": "TensorFlow", "flax": "Flax"}
_FOREIGN_ENDS = (":0", ".kernel", ".embedding", ".scale")  # TensorFlow's variable names, Flax's parameter names


def take_tensor(tensors: dict, name: str, shape: tuple, where: Path, used: set | None = None) -> np.ndarray:
    """The float32 tensor ``name`` of ``shape`` from read_tensors' dict, refused naming it if missing or misshapen
    (the check every family's name table goes through; ``used`` collects the names taken)."""
    return _take(tensors, name, shape, where, used)


def load_weights(model_dir: str | Path, config: BertConfig, precision: str = "fp32") -> BertWeights:
    """Load, map, check, fuse and transpose every tensor of a BERT checkpoint; in bf16, round the
    layers' linear weights to bf16 (each float32 copy is dropped as soon as its layer is built)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: choose one of {PRECISIONS}")
    model_dir = Path(model_dir)
    files = checkpoint_files(model_dir)
    bf16: set[str] = set()  # names of the tensors read_tensors rounded to bf16
    tensors = read_tensors(files, bf16 if precision == "bf16" else None, config.model_type)

    def linear(a: np.ndarray) -> np.ndarray:  # (in, out) -> storage: bf16 in bf16 mode (already, from read_tensors)
        return to_bf16(a, saturate=True) if precision == "bf16" and a.dtype != np.uint16 else a

    where = files[0] if len(files) == 1 else model_dir
    c = config
    used: set[str] = set()

    emb_table, layer_table, mlm_table, decoder = name_tables(c)
    emb = {k: _take(tensors, n, s(c), where, used) for k, (n, s) in emb_table.items()}
    layers = []
    for i in range(c.num_hidden_layers):
        t = {k: _take(tensors, n.format(i=i), s(c), where, used, bf16) for k, (n, s) in layer_table.items()}
        layers.append(
            LayerWeights(
                qkv_w=linear(np.ascontiguousarray(np.concatenate([t["q_w"].T, t["k_w"].T, t["v_w"].T], axis=1))),  # (H, 3H)
                qkv_b=np.concatenate([t["q_b"], t["k_b"], t["v_b"]]),
                o_w=linear(np.ascontiguousarray(t["o_w"].T)),
                o_b=t["o_b"],
                ln1_g=t["ln1_g"],
                ln1_b=t["ln1_b"],
                up_w=linear(np.ascontiguousarray(t["up_w"].T)),  # (H, F)
                up_b=t["up_b"],
                down_w=linear(np.ascontiguousarray(t["down_w"].T)),  # (F, H)
                down_b=t["down_b"],
                ln2_g=t["ln2_g"],
                ln2_b=t["ln2_b"],
            )
        )
        if precision == "bf16":  # the checkpoint's (out, in) linear weights are not needed any more
            for k in ("q_w", "k_w", "v_w", "o_w", "up_w", "down_w"):
                tensors.pop(layer_table[k][0].format(i=i), None)
    extra = layer_table["q_w"][0].format(i=c.num_hidden_layers)
    if extra in tensors:
        raise WeightsError(
            f"{where}: the checkpoint has more layers than num_hidden_layers={c.num_hidden_layers} in config.json",
            "use the config.json that came with these weights",
        )

    w = BertWeights(
        config=c, word=emb["word"], position=emb["position"], token_type=emb.get("token_type"),
        emb_ln_g=emb["ln_g"], emb_ln_b=emb["ln_b"], layers=layers, files=files, precision=precision,
    )
    if c.embedding_width != c.hidden_size:  # ELECTRA's embeddings_project
        p = {k: _take(tensors, n, s(c), where, used) for k, (n, s) in _ELECTRA_PROJECT.items()}
        w.emb_proj_w, w.emb_proj_b = np.ascontiguousarray(p["w"].T), p["b"]
    if c.model_type in ("electra", "distilbert"):  # their models have no pooler
        w.missing_pooler_reason = f"{c.family} models have no pooler ({c.family}Model has no pooler layer)"
    elif any(n in tensors for n, _ in _POOLER.values()):  # half a pooler: the missing half named (_take)
        p = {k: _take(tensors, n, s(c), where, used) for k, (n, s) in _POOLER.items()}
        w.pooler_w, w.pooler_b = np.ascontiguousarray(p["w"].T), p["b"]
    else:
        w.missing_pooler_reason = f"{where} has no pooler weights (pooler.dense.weight / pooler.dense.bias)"
    w.mlm = take_mlm_head(lambda n, s: _take(tensors, n, s, where, used), tensors, mlm_table, decoder, c, w.word)
    if w.mlm is None and all(n in tensors for n, _ in mlm_table.values()):
        w.missing_mlm_reason = untied_decoder_missing(c, tensors, decoder[0], where)
    w.ignored = leftover_tensors(tensors, used, where, c.family, OTHER_HEADS, ALLOWED_UNUSED,
                                 " (another architecture, or a renamed/extra tensor)")
    return w


def take_mlm_head(take, tensors: dict, table: dict, decoder: tuple, c: BertConfig, word: np.ndarray) -> dict | None:
    """A masked-LM head (BERT's table shape: dense, LayerNorm, bias) when the checkpoint holds it, else None:
    ``take(name, shape)`` takes each tensor; dense transposed; the decoder is usually tied to the word embeddings
    and taken only when stored.

    The bias is the decoder's own (``cls.predictions.decoder.bias``, RoBERTa's ``lm_head.decoder.bias``) when the
    checkpoint stores it, as transformers 5 computes the logits with it: tied to ``cls.predictions.bias`` (equal) in
    most checkpoints, its own values in an untied one (tie_word_embeddings false, or the two stored different, which
    transformers then leaves untied)."""
    bias_name, bias_shape = table["bias"]
    dec_bias = decoder[0].removesuffix("weight") + "bias"
    own = dec_bias if dec_bias != bias_name and dec_bias in tensors else None
    if not all(n in tensors or (k == "bias" and own) for k, (n, _) in table.items()):
        return None
    m = {k: take(n, s(c)) for k, (n, s) in table.items() if n in tensors}
    if own:
        m["bias"] = take(own, bias_shape(c))
    m["dense_w"] = np.ascontiguousarray(m["dense_w"].T)
    m["decoder_w"] = take(decoder[0], decoder[1](c)) if decoder[0] in tensors else word
    return None if untied_decoder_missing(c, tensors, decoder[0], "") else m


def untied_decoder_missing(c: BertConfig, tensors: dict, decoder: str, where) -> str | None:
    """Why a masked-LM head is not run, or None: config.json's tie_word_embeddings false with no decoder tensor stored
    (``decoder``). Tied to the word embeddings it would give logits transformers never gives (it fills the decoder
    with random values, "MISSING" in its load report); the head's other tensors are taken, as used, all the same."""
    if c.untied_decoder and decoder not in tensors:
        if isinstance(tensors, Tensors) and any(n.startswith("lm_head.") for n in tensors.stored.values()):
            decoder = next((old + decoder[len(new):] for old, new in _LM_HEAD_NAMES.items()  # RoBERTa's spelling
                            if decoder.startswith(new)), decoder)
        return (f"{where} has a masked-LM head without its decoder ({decoder}), and config.json's tie_word_embeddings "
                "false says the decoder is not the word embeddings (transformers fills it with random values)")
    return None


def leftover_tensors(tensors: dict, used: set, where, family: str, other_heads: tuple, allowed=(), hint: str = "",
                     article: str = "a") -> list[str]:
    """Nothing is ignored silently: of the tensors no table took (less ``allowed``), other tasks' heads
    (``other_heads`` prefixes) are returned, sorted, to be listed as ignored; any other is refused by name.
    ``family``: as messages name it ("BERT", with its ``article``); ``hint``: what to check, in the fix."""
    unused = [n for n in tensors if n not in used and n not in allowed]
    unknown = sorted(n for n in unused if not n.startswith(other_heads))
    if unknown:
        spelled = tensors.shown if isinstance(tensors, Tensors) else str  # as the file spells them
        shown = ", ".join(f"'{spelled(n)}' {tuple(tensors[n].shape)}" for n in unknown[:5]) + (
            f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise WeightsError(f"{where}: {len(unknown)} tensor(s) that {article} {family} encoder does not use: {shown}",
                           f"these weights are not a plain {family} as config.json says{hint}; "
                           "use the config.json that came with them, or remove the extra tensors")
    return sorted(n for n in unused if n.startswith(other_heads))


def weights_sha256(files: list[Path]) -> str:
    """sha256 over the checkpoint file(s) in order: the weights' identity for provenance."""
    h = hashlib.sha256()
    for f in files:
        with open(f, "rb") as fh:
            while chunk := fh.read(1 << 22):
                h.update(chunk)
    return h.hexdigest()
