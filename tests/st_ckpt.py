"""sentence-transformers model folders and RoBERTa-family checkpoints with random weights, for tests.

    from st_ckpt import st_folder, roberta_checkpoint

    d = st_folder(tmp / "labse", pooling="cls", dense=[(32, "tanh")], normalize=True,
                  prompts={"query": "query: "}, default_prompt_name="query")
    r = roberta_checkpoint(tmp / "xlmr", model_type="xlm-roberta")

Every folder is written by the installed sentence-transformers (``SentenceTransformer.save``), as a
user's fine-tuned model would be, so bertfeat is checked against the files the library really writes.
The encoder weights come from ckpt.make_checkpoint (BERT) or a transformers RobertaModel /
XLMRobertaModel re-initialised with _randomize_any (every tensor informative). RoBERTa-family
tokenizers are trained here with ``tokenizers`` on a few real sentences (no model hub): a byte-level
BPE for 'roberta', a SentencePiece Unigram for 'xlm-roberta', with <s> <pad> </s> <unk> <mask> at ids
0..4 as in the released checkpoints.
"""

from __future__ import annotations

import json
import shutil
from functools import lru_cache
from pathlib import Path

import numpy as np

from ckpt import make_checkpoint

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on the street corner while people walk by.",
    "Machine learning models turn sentences into vectors of numbers.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "Le renard brun rapide saute par-dessus le chien paresseux.",
    "El zorro marrón rápido salta sobre el perro perezoso.",
    "Numbers like 42, 3.14 and 2026 appear in text too!",
    "query: how do I bake bread? passage: mix flour, water, salt and yeast.",
    "快速的棕色狐狸跳过了懒狗。",
    "Sentence embeddings are compared with the cosine similarity.",
] * 3
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


@lru_cache(maxsize=4)
def _roberta_tokenizer_json(kind: str) -> str:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    if kind == "roberta":
        tk = Tokenizer(models.BPE(unk_token=None))
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tk.train_from_iterator(_CORPUS, trainer)
        tk.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True, add_prefix_space=False)
    else:
        tk = Tokenizer(models.Unigram())
        tk.normalizer = normalizers.Sequence([normalizers.NFKC()])
        tk.pre_tokenizer = pre_tokenizers.Metaspace()
        tk.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=300, special_tokens=SPECIALS, unk_token="<unk>")
        tk.train_from_iterator(_CORPUS, trainer)
        tk.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
            special_tokens=[("<s>", 0), ("</s>", 2)])
    for t in SPECIALS:
        assert tk.token_to_id(t) == SPECIALS.index(t), t
    from tokenizers import AddedToken
    tk.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
    return tk.to_str()


def roberta_checkpoint(dir, *, model_type: str = "xlm-roberta", hidden: int = 64, layers: int = 2, heads: int = 4,
                       max_position: int = 130, mlm_head: bool = False, seed: int = 0, prefix: bool = False) -> Path:
    """A random-weight RoBERTa / XLM-RoBERTa checkpoint (config.json, model.safetensors, tokenizer.json)."""
    from safetensors.numpy import save_file
    from transformers import PreTrainedTokenizerFast

    d = Path(dir)
    d.mkdir(parents=True, exist_ok=True)
    kind = "roberta" if model_type == "roberta" else "xlm-roberta"
    tok = PreTrainedTokenizerFast(tokenizer_object=_tokenizer(kind), bos_token="<s>", eos_token="</s>",
                                  cls_token="<s>", sep_token="</s>", pad_token="<pad>", unk_token="<unk>",
                                  mask_token="<mask>", model_max_length=max_position - 2)
    tok.model_input_names = ["input_ids", "attention_mask"]
    tok.save_pretrained(str(d))
    model = reference_roberta(kind, len(tok), hidden, layers, heads, max_position, mlm_head, seed)
    cfg = model.config.to_dict()
    cfg["architectures"] = [type(model).__name__]
    (d / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tensors = {}
    for name, t in model.state_dict().items():
        if name in ("lm_head.decoder.weight", "lm_head.decoder.bias") or name.endswith("position_ids"):
            continue  # tied to the word embeddings / lm_head.bias, as save_pretrained leaves them out
        base = name[len("roberta."):] if name.startswith("roberta.") else name
        out = ("roberta." + base) if (prefix and not name.startswith("lm_head.")) else base
        tensors[out] = t.detach().cpu().numpy().astype(np.float32).copy()
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    return d


def _tokenizer(kind: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_str(_roberta_tokenizer_json(kind))


@lru_cache(maxsize=8)
def reference_roberta(kind: str, vocab: int, hidden: int, layers: int, heads: int, max_position: int,
                      mlm_head: bool, seed: int):
    """The torch (XLM-)RoBERTa model with the checkpoint's weights (eval, fp32, eager attention)."""
    import torch
    from transformers import (RobertaConfig, RobertaForMaskedLM, RobertaModel, XLMRobertaConfig,
                              XLMRobertaForMaskedLM, XLMRobertaModel)

    Cfg, Model, MLM = ((RobertaConfig, RobertaModel, RobertaForMaskedLM) if kind == "roberta"
                       else (XLMRobertaConfig, XLMRobertaModel, XLMRobertaForMaskedLM))
    config = Cfg(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                 intermediate_size=4 * hidden, max_position_embeddings=max_position, type_vocab_size=1,
                 pad_token_id=1, bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = MLM(config) if mlm_head else Model(config)
    _randomize_any(model, seed)
    if mlm_head:
        model.tie_weights()
    return model.eval().float()


def _randomize_any(model, seed: int, embedding=lambda name: "embeddings" in name) -> None:
    """Every tensor informative, for any module names: 1-D weights are LayerNorm gains 1 + N(0, 0.1) (lm_head.layer_norm
    too), biases N(0, 0.1), the tensors ``embedding(name)`` picks N(0, 0.25), (out, in) linear weights N(0, 1 / in)."""
    import math

    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("weight") and p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif embedding(name):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:  # (out, in) linear weight
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))


def st_folder(dir, *, base: Path | None = None, pooling="mean", include_prompt: bool = True,
              dense: list[tuple[int, str]] = (), normalize: bool = False, prompts: dict | None = None,
              default_prompt_name: str | None = None, max_seq_length: int | None = None, truncate_dim: int | None = None,
              **ckpt_kwargs) -> Path:
    """A sentence-transformers model saved by the installed library: Transformer -> Pooling -> Dense* -> Normalize.

    ``base``: an existing encoder checkpoint (default: ckpt.make_checkpoint with a tokenizer.json);
    ``pooling``: a mode or a list (concatenated); ``dense``: (out_features, activation) per Dense layer,
    activation one of tanh, identity, relu, gelu, sigmoid; ``truncate_dim``: saved by the library in
    config_sentence_transformers.json (a Matryoshka model's shorter embedding).
    """
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    d = Path(dir)
    if base is None:
        base = make_checkpoint(d.parent / (d.name + "_base"), tokenizer="json", **ckpt_kwargs)
    t = Transformer(str(base), max_seq_length=max_seq_length)
    p = Pooling(t.get_embedding_dimension(), pooling_mode=pooling, include_prompt=include_prompt)
    mods = [t, p]
    width = p.get_embedding_dimension()
    acts = {"tanh": torch.nn.Tanh(), "identity": torch.nn.Identity(), "relu": torch.nn.ReLU(),
            "gelu": torch.nn.GELU(), "sigmoid": torch.nn.Sigmoid()}
    g = torch.Generator().manual_seed(7)
    for out, act in dense:
        layer = Dense(width, out, activation_function=acts[act])
        with torch.no_grad():
            layer.linear.weight.copy_(torch.randn(out, width, generator=g) / np.sqrt(width) * 2)
            layer.linear.bias.copy_(torch.randn(out, generator=g) * 0.1)
        mods.append(layer)
        width = out
    if normalize:
        mods.append(Normalize())
    m = SentenceTransformer(modules=mods, prompts=prompts, default_prompt_name=default_prompt_name, device="cpu",
                            truncate_dim=truncate_dim)
    if d.exists():
        shutil.rmtree(d)
    m.save(str(d))
    return d


#: what stays at the top of a sentence-transformers folder in the older layout (the module folders stay too)
_OLDER_LAYOUT_TOP = ("modules.json", "config_sentence_transformers.json", "README.md")


def older_layout(src, dst, *, sub: str = "0_Transformer") -> Path:
    """A copy of model folder ``src`` at ``dst`` in the older sentence-transformers layout (as sentence-transformers
    < 2 saved it, still loaded by 6.x): the encoder's files (config.json, weights, tokenizer files,
    sentence_bert_config.json) moved into ``sub``, which modules.json names for the Transformer module
    (type sentence_transformers.models.Transformer); modules.json, config_sentence_transformers.json and the other
    module folders (1_Pooling, 2_Dense, ...) stay at the top. A plain checkpoint gets a modules.json with the
    Transformer and a mean Pooling in 1_Pooling/."""
    d = Path(dst)
    shutil.copytree(src, d)
    (d / sub).mkdir()
    for f in sorted(d.iterdir()):
        if f.is_file() and f.name not in _OLDER_LAYOUT_TOP:
            f.rename(d / sub / f.name)
    mods_file = d / "modules.json"
    if mods_file.is_file():
        mods = json.loads(mods_file.read_text())
    else:  # a plain checkpoint: the Transformer and a mean Pooling (without a Pooling there is no sentence embedding)
        hidden = json.loads((d / sub / "config.json").read_text())["hidden_size"]
        (d / "1_Pooling").mkdir()
        (d / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": hidden,
                                                                 "pooling_mode_mean_tokens": True}))
        mods = [{"idx": 0, "name": "0"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    mods[0].update(path=sub, type="sentence_transformers.models.Transformer")
    mods_file.write_text(json.dumps(mods, indent=2) + "\n")
    return d


def camembert_added_tokens_folder(dir, *, seed: int = 0) -> Path:
    """A CamemBERT sentence-transformers folder (Transformer -> mean Pooling) whose tokenizer has added tokens past the
    word embedding table, as camembert-base's has under transformers 5: CamembertTokenizer built on a SentencePiece
    vocabulary without '<s>NOTUSED', '</s>NOTUSED', '<unk>NOTUSED' appends them as special tokens at ids vocab_size
    .. vocab_size + 2, while config.json's vocab_size (and the table) stays the vocabulary's. Random weights."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import CamembertConfig, CamembertModel, CamembertTokenizer

    d = Path(dir)
    base = d.parent / (d.name + "_base")
    vocab = [tuple(p) for p in json.loads(_roberta_tokenizer_json("xlm-roberta"))["model"]["vocab"]]
    tok = CamembertTokenizer(vocab=vocab, model_max_length=128)
    config = CamembertConfig(vocab_size=len(vocab), hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=96, max_position_embeddings=130, type_vocab_size=1, pad_token_id=1,
                             bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5)
    torch.manual_seed(seed)
    model = CamembertModel(config)
    _randomize_any(model, seed)
    model.save_pretrained(str(base))
    tok.save_pretrained(str(base))
    t = Transformer(str(base))
    SentenceTransformer(modules=[t, Pooling(t.get_embedding_dimension(), pooling_mode="mean")], device="cpu").save(str(d))
    return d
