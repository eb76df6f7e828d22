"""Looking inside a model: info, tokens, attention maps, fill-mask."""

from __future__ import annotations

from pathlib import Path

import numpy as np



def model_file_paths(model: str | None = None) -> list[Path]:
    """The files a model's vectors depend on, without loading it: every file its loading reads (hub.model_files, the
    list the cache key and the resume manifest hash too), its weights (safetensors, or pytorch_model.bin; and their index) first, each
    inside the model folder. For build tools: ``bertfeat info MODEL --files``."""
    from .model.hub import model_files, resolve_model

    loc = resolve_model(model)
    return [loc.path / rel for rel in model_files(loc.path)]


def model_info(model: str | None = None) -> dict:
    """Config, parameter count, default pooling, max length and where the model was found (``path``; the encoder's
    files in ``encoder_files``: the same folder, or the Transformer folder of an older sentence-transformers layout)."""
    from .model.encoder import Encoder
    from .errors import BertfeatError

    enc = Encoder(model)
    w = enc.weights
    try:
        own = enc.spec()
    except BertfeatError as e:  # a modules.json without a Pooling: the model has no embedding of its own
        own = e
    return {
        "model_id": enc.model_id,
        "path": str(enc.location.path),
        "encoder_files": str(enc.location.encoder_path),  # path, or its Transformer folder in the older ST layout
        "found_in": enc.location.source,
        "parameters": w.n_params,
        "weights_files": [Path(f).name for f in w.files],
        "pooler": "yes" if w.pooler_w is not None else f"no ({w.missing_pooler_reason}; --pooling pooled is unavailable)",
        "mlm_head": "yes" if w.mlm is not None else "no",
        "model_type": enc.config.model_type,
        "family": enc.config.family,
        "embedding": own.what if isinstance(own, BertfeatError) else enc.describe(own),
        "embedding_dim": None if isinstance(own, BertfeatError) else enc.output_dim(own),
        "default_pooling": f"{enc.default_pooling} ({enc.pooling_source})",
        "prompts": enc.prompts or "none",
        "default_prompt_name": enc.pipeline.default_prompt_name,
        "max_length": enc.max_length,
        "max_length_source": enc.pipeline.max_length_source,
        "tokenizer": enc.tokenizer.source,
        "threads": enc.threads,
        "blas": _blas_summary(),
        "kernels": _kernels_summary(),
        **_precision_summary(),
        "config": config_settings(enc.config),
    }


def config_settings(config) -> dict:
    """The config settings ``info`` shows: those of the model's own family.

    BertConfig holds every family's settings, with defaults for the ones a family does not have (ModernBERT's rotary
    bases, MPNet's buckets ...): listed for a BERT model they read as settings of that model. A user reading ``info``
    wants the settings the encoder runs this model with, so the family's: every field but another family's (and
    type_vocab_size for a model without token types), with the value in use. Not config.json's keys: those include
    settings bertfeat does not use (dropout, architectures) and leave out the defaults it applies, and a family's
    names differ (DistilBERT's dim, ModernBERT's norm_eps). ``config.to_dict()`` itself stays whole: it is the
    config as a record (a new field is shown unless listed below)."""
    from .model.config import MODERNBERT_FIELDS, MODERNBERT_TYPES, MPNET_TYPES

    own = {"relative_attention_num_buckets": MPNET_TYPES, "embedding_size": ("electra",),
           **{k: MODERNBERT_TYPES for k in MODERNBERT_FIELDS}}  # a field -> the model types that have it
    return {k: v for k, v in config.to_dict().items() if config.model_type in own.get(k, (config.model_type,))
            and not (k == "type_vocab_size" and not config.token_types)}


def _precision_summary() -> dict:
    """The CPU, its bf16 support, and whether --precision bf16 is available and accelerated here (gemm.py)."""
    from .ops import cpu, gemm

    d = gemm.describe_bf16()
    flags = ", ".join(cpu.bf16_flags()) or "none"
    fp32 = gemm.resolve("fp32")
    return {"cpu": f"{d['cpu']} (flags: {flags})", "bf16": d["status"], "bf16_library": d["library"],
            "fp32_gemm": f"{gemm.describe_library(fp32)} ({fp32.reason})", "int8": gemm.describe_int8(),
            "precision_auto": gemm.describe_auto()}


def _kernels_summary() -> str:
    """The element-wise backend (kernels.py): fused numba kernels, or NumPy and why."""
    from .ops import kernels

    name = kernels.backend()
    if name == "numba":
        import numba

        return f"numba {numba.__version__} (fused GELU, add + LayerNorm, softmax)"
    why = kernels.unavailable_reason()
    if why:
        return f"numpy (numba unavailable: {why})"
    import os

    return "numpy (BERTFEAT_KERNELS=numpy)" if os.environ.get("BERTFEAT_KERNELS") else "numpy (kernels.use('numpy'))"


def _blas_summary() -> str:
    """NumPy's BLAS, its kernel and threads, and whether bertfeat chose the kernel (threads.py)."""
    from .ops import threads

    b = threads.blas_info()
    text = f"{b.get('internal_api')} {b.get('version')} kernel {b.get('architecture')}" if b else "unknown"
    return text + (f" ({threads.blas_kernel_note})" if threads.blas_kernel_note else "")


# --------------------------------------------------------------------------- shared
def _encoder(model, max_length: int | None = None, encoder=None, precision: str | None = None):
    """The given Encoder, or one loaded for ``model`` (its max length checked) in ``precision`` (None: fp32). A
    model or precision given beside an encoder is refused: it would be ignored (the encoder's runs)."""
    from .errors import BertfeatError

    if encoder is not None:
        if model is not None:
            raise BertfeatError(f"model={model!r} given with encoder=: the encoder's own model would run",
                                "give either model= or encoder=, not both")
        if precision is not None and precision not in (encoder.precision, encoder.requested_precision):
            raise BertfeatError(f"precision={precision!r} given with an encoder that runs {encoder.precision!r}",
                                f"leave precision out (the encoder's is used), or load "
                                f"Encoder(..., precision={precision!r}) and pass that")
        return encoder
    from .model.encoder import Encoder

    return Encoder(model, max_length=max_length, precision=precision or "fp32")


def _max_length(enc, max_length: int | None) -> int:
    return enc.checked_max_length(max_length) if max_length else enc.max_length


def atomic_write(path: str | Path, write) -> Path:
    """Call ``write(fh)`` on a temporary file beside ``path``, then move it into place (atomic.py)."""
    from .atomic import atomic_output, remove_stale_temps
    from .errors import BertfeatError

    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise BertfeatError(f"cannot write {path}: directory {parent} does not exist", "create it, or choose another path")
    remove_stale_temps(path)  # a killed writer's
    with atomic_output(path) as tmp, open(tmp, "wb") as fh:
        write(fh)
    return path


TEXT_FIX = ("decode it with its real encoding first (bytes.decode('latin-1'), say), or read a file in another "
            "encoding with bertfeat.extract(..., encoding=...)")


def check_text(value: str, param: str = "text") -> None:
    """Refuse a text the tokenizer cannot take: anything but a str (None, bytes, a number reached the tokenizer as its
    TypeError, and a list of two texts was tokenized as a sentence pair), or a str with lone surrogates (undecodable
    bytes kept by surrogateescape)."""
    from .checks import invalid_unicode
    from .errors import BertfeatError, opt

    if not isinstance(value, str):
        shown = "None" if value is None else f"{value!r:.40} ({type(value).__name__})"
        raise BertfeatError(f"{opt(param)} is {shown}, not a string",
                            f"give {opt(param)} as one str (Encoder.encode takes a list of texts)")
    where = invalid_unicode(value)
    if where:
        raise BertfeatError(f"{opt(param)} is not valid Unicode ({where})", TEXT_FIX)


def check_texts(text: str, pair: str | None) -> None:
    """check_text of a text and of its pair, if any (None: none)."""
    check_text(text, "text")
    if pair is not None:
        check_text(pair, "pair")


# --------------------------------------------------------------------------- tokens
def tokenize_text(text: str, pair: str | None = None, model: str | None = None, max_length: int | None = None,
                  *, encoder=None) -> dict:
    """How ``text`` (and ``pair``) is cut into wordpieces: one JSON-ready dict.

    Keys: model, text, pair, max_length, n_tokens (after truncation), n_tokens_full (before),
    truncated, tokens, input_ids, token_type_ids, attention_mask (the last four per position,
    special tokens included, as the model receives them: a pair's token types are all 0 for a model whose
    tokenizer gives it no token_type_ids, Encoder.pairs_untyped, whatever the tokenizer's template says).
    """
    check_texts(text, pair)
    enc = _encoder(model, max_length, encoder)
    ml = _max_length(enc, max_length)
    e, truncated, n_full = enc.tokenizer.tokens(text, pair, ml)
    types = [0] * len(e.ids) if enc.pairs_untyped else [int(i) for i in e.type_ids]
    return {
        "model": enc.model_id,
        "text": text,
        "pair": pair,
        "max_length": ml,
        "n_tokens": len(e.ids),
        "n_tokens_full": int(n_full),
        "truncated": bool(truncated),
        "tokens": list(e.tokens),
        "input_ids": [int(i) for i in e.ids],
        "token_type_ids": types,
        "attention_mask": [int(i) for i in e.attention_mask],
    }


def _model_inputs(enc, e, pair: str | None) -> tuple[np.ndarray, np.ndarray]:
    """One tokenized row (``tokenizer.tokens``) as the model's (1, T) ids and token types, checked as extract checks
    a row: every token has an embedding; a pair needs a second token type (RoBERTa's: all 0)."""
    ids = np.asarray([e.ids], dtype=np.int64)
    enc.check_embeddable(list(ids), label=lambda i: "the text")
    types = np.asarray([e.type_ids], dtype=np.int64)
    if pair is not None:
        enc.check_pair_types(list(types))
    elif enc.single_types_dropped:  # as Encoder.prepare: the template's types, which the model never receives
        types[:] = 0
    return ids, types


# --------------------------------------------------------------------------- attention
def attention_maps(text: str, pair: str | None = None, model: str | None = None, max_length: int | None = None,
                   *, encoder=None, precision: str | None = None) -> tuple[list[str], np.ndarray]:
    """Attention probabilities of every layer and head: (tokens, float32 array (layers, heads, T, T)).

    ``a[l, h, q, k]`` is how much query token q attends to key token k in layer l (0-based), head h;
    each row sums to 1. Long texts are truncated to the max length (see ``tokenize_text``).
    """
    from .model.families import forward

    check_texts(text, pair)
    enc = _encoder(model, max_length, encoder, precision)
    e, _, _ = enc.tokenizer.tokens(text, pair, _max_length(enc, max_length))
    ids, types = _model_inputs(enc, e, pair)
    mask = np.ones_like(ids)
    out = forward(enc.weights, ids, types, mask, keep=(), output_attentions=True)
    return list(e.tokens), np.stack([a[0] for a in out.attentions]).astype(np.float32, copy=False)


def check_layer_head(n_layers: int, n_heads: int, layer: int, head: int | None) -> tuple[int, int | None]:
    """Python-style indices (negative from the end) -> 0-based (layer, head); clear errors when out of range or not
    whole numbers (NumPy integers and 2.0 pass; a bool, a string or 1.5 are refused naming it, not left to fail as
    an array index)."""
    from .errors import BertfeatError, opt

    layer_i = _index(layer, "layer")
    if not -n_layers <= layer_i < n_layers:
        raise BertfeatError(f"{opt('layer', layer)} is out of range", _index_range(n_layers, "layer", "layers"))
    head_i = None if head is None else _index(head, "head")
    if head_i is not None and not -n_heads <= head_i < n_heads:
        raise BertfeatError(f"{opt('head', head)} is out of range",
                            _index_range(n_heads, "head per layer", "heads per layer"))
    return layer_i % n_layers, (None if head_i is None else head_i % n_heads)


def _index(value, name: str) -> int:
    """A layer or head index as an int, or an error naming ``name``."""
    import numbers

    from .errors import BertfeatError, opt

    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if real and (isinstance(value, numbers.Integral) or float(value).is_integer()):
        return int(value)
    raise BertfeatError(f"{opt(name, value)} is not a whole number",
                        f"give {opt(name)} a 0-based index, negative counting from the end (-1: the last)")


def _index_range(n: int, one: str, many: str) -> str:
    if n == 1:
        return f"the model has 1 {one}: choose 0, or -1 from the end"
    return f"the model has {n} {many}: choose 0..{n - 1}, or -{n}..-1 from the end"


PLOT_DPI = 100
SINGLE_INCHES = 8  # one head: 800 x 800 px
GRID_CELL_INCHES = 4  # all heads: 400 x 400 px per head
GRID_COLS = 4


def figure_pixels(n_maps: int) -> tuple[int, int]:
    """(width, height) in pixels of the PNG for one map (n_maps 1) or a grid of n_maps heads."""
    if n_maps == 1:
        return SINGLE_INCHES * PLOT_DPI, SINGLE_INCHES * PLOT_DPI
    cols = min(GRID_COLS, n_maps)
    rows = -(-n_maps // cols)
    return cols * GRID_CELL_INCHES * PLOT_DPI, rows * GRID_CELL_INCHES * PLOT_DPI


_CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans CJK JP", "Source Han Sans SC", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei",
              "Droid Sans Fallback", "SimHei", "Microsoft YaHei", "PingFang SC", "Heiti SC", "Arial Unicode MS")


def plot_attention(tokens: list[str], attn: np.ndarray, path: str | Path, layer: int, head: int | None = None,
                   title: str | None = None) -> Path:
    """Heatmap(s) of ``attn`` (layers, heads, T, T) at ``layer``: one ``head``, or all heads in a grid (head None).

    Rows are queries, columns keys, tokens on both axes; colour scale 0..max of the maps shown.
    The figure size is fixed (see ``figure_pixels``); the PNG is written atomically. Chinese and other
    wordpieces use an installed CJK font when there is one (else they show as boxes, without warnings). Every label
    is drawn as the text it is, never as matplotlib's mathtext: a wordpiece such as ``$$`` or ``$x^$`` (or a model
    folder with ``$`` in its name, in the title) is not a formula to parse.
    """
    import warnings

    import matplotlib
    from matplotlib import font_manager

    installed = {f.name for f in font_manager.fontManager.ttflist}
    family = ["DejaVu Sans"] + [f for f in _CJK_FONTS if f in installed]
    with matplotlib.rc_context({"font.family": family, "text.parse_math": False}), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from")
        return _plot_attention(tokens, attn, path, layer, head, title)


def _plot_attention(tokens, attn, path, layer, head, title) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    L, nh, T, _ = attn.shape
    layer, head = check_layer_head(L, nh, layer, head)
    heads = list(range(nh)) if head is None else [head]
    maps = attn[layer, heads]
    w, h = figure_pixels(len(heads))
    fig = Figure(figsize=(w / PLOT_DPI, h / PLOT_DPI), dpi=PLOT_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    cols = 1 if len(heads) == 1 else min(GRID_COLS, len(heads))
    rows = -(-len(heads) // cols)
    axes = fig.subplots(rows, cols, squeeze=False)
    vmax = float(maps.max()) if maps.size else 1.0
    step = max(1, -(-T // 64))  # label at most ~64 tokens per axis
    ticks = list(range(0, T, step))
    labels = [tokens[i] for i in ticks]
    size = max(3.0, min(10.0, (240.0 if len(heads) == 1 else 120.0) / max(len(ticks), 1)))
    im = None
    for n, ax in enumerate(axes.flat):
        if n >= len(heads):
            ax.set_axis_off()
            continue
        im = ax.imshow(maps[n], cmap="viridis", vmin=0.0, vmax=vmax, interpolation="nearest", aspect="equal")
        if len(heads) > 1 or not title:
            ax.set_title(f"layer {layer}, head {heads[n]}", fontsize=10 if len(heads) == 1 else 8)
        ax.set_xticks(ticks)
        ax.set_yticks(ticks)
        r, c = divmod(n, cols)
        ax.set_xticklabels(labels if r == rows - 1 or n + cols >= len(heads) else [], rotation=90, fontsize=size)
        ax.set_yticklabels(labels if c == 0 else [], fontsize=size)
        if len(heads) == 1:
            ax.set_xlabel("key (attended to)")
            ax.set_ylabel("query (attending)")
    if im is not None:
        fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8 if len(heads) == 1 else 0.6, label="attention probability")
    if title:
        fig.suptitle(title, fontsize=11)
    return atomic_write(path, lambda fh: fig.savefig(fh, format="png", dpi=PLOT_DPI))


def save_attention_npy(attn: np.ndarray, path: str | Path) -> Path:
    """The raw (layers, heads, T, T) float32 array as .npy, written atomically."""
    return atomic_write(path, lambda fh: _write_npy(fh, np.ascontiguousarray(attn, dtype=np.float32)))


def _write_npy(fh, a: np.ndarray) -> None:
    """np.save's bytes through the file's own write: np.save's tofile reports a short write (a full disk, ulimit -f)
    as '276768 requested and 51168 written', with no errno to say which."""
    np.lib.format.write_array_header_1_0(fh, np.lib.format.header_data_from_array_1_0(a))
    fh.write(memoryview(a).cast("B"))


def write_attention(text: str, output: str | Path, pair: str | None = None, model: str | None = None, layer: int = -1,
                    head: int | None = 0, save_npy: str | Path | None = None, max_length: int | None = None,
                    *, encoder=None, precision: str | None = None, overwrite: bool = False) -> dict:
    """Attention heatmap PNG of one layer (one head, or every head with head None), and optionally the raw .npy.

    Parameters
    ----------
    text, pair : str
        The text (and the second text of a sentence pair, token type id 1).
    output : str or Path
        The PNG file to write (a name ending in .png, in an existing folder).
    model, max_length, encoder, precision
        The model, as for ``bertfeat.extract`` (``encoder``: an ``Encoder`` already loaded, used as it is: a
        ``model`` or a ``precision`` other than the encoder's given beside it is refused; ``precision`` None: fp32).
    layer, head : int
        0-based; negative counts from the end. ``head`` None: every head of the layer, in a grid.
    save_npy : str or Path, optional
        Also write the raw (layers, heads, T, T) float32 array there (a name ending in .npy).
    overwrite : bool, default False
        Replace an existing ``output`` or ``save_npy`` file. Without it an existing one is refused (a
        ``BertfeatError`` naming the file) and nothing is written, as ``bertfeat.extract`` and
        ``bertfeat attention`` (``--overwrite``) do.

    Returns
    -------
    dict
        What was written (for the CLI): model, layer, heads, n_tokens, png, png_pixels, npy, npy_shape.

    Both files are written atomically, under the run lock of each (a second writer of the same files is refused);
    layer and head are checked before the model runs.
    """
    from .errors import opt
    from .run.options import check_switch
    from .run.outlock import output_lock
    from .run.outputs import check_outputs

    overwrite = check_switch("overwrite", overwrite)
    _check_attention_outputs(output, save_npy)
    check_texts(text, pair)
    npy_file = f"{opt('save_npy')} file"  # "the --save-npy file ..." on the command line, "the save_npy file" here
    outs = [("output", output)] + ([(npy_file, save_npy)] if save_npy is not None else [])
    # then what overwrite decides (a wrong name first: overwrite would not make it right), under each file's run
    # lock: a second writer is refused rather than replacing the files checked here
    with output_lock(*(p for _, p in outs), create=False):
        check_outputs(outs, [], overwrite, options={npy_file: "save_npy"})  # its fixes name save_npy, not output
        return _write_attention(text, output, pair, model, layer, head, save_npy, max_length, encoder, precision)


def _check_attention_outputs(output, save_npy) -> None:
    """The PNG's and the .npy's names: their extension, and a folder that exists (refused, not made)."""
    from .checks import path_text
    from .errors import BertfeatError, opt

    for p, ext, param in ((output, ".png", "output"), (save_npy, ".npy", "save_npy")):
        if p is not None:
            path_text(p, param)  # bytes: pathlib's TypeError, which named no parameter
        if p is not None and Path(p).suffix.lower() != ext:
            raise BertfeatError(f"{opt(param, str(p))} does not end in {ext}", f"give {opt(param)} a file name ending in {ext}")
        if p is not None and not (Path(p).parent if str(Path(p).parent) else Path(".")).is_dir():  # before the PNG is written
            raise BertfeatError(f"cannot write {p}: directory {Path(p).parent} does not exist", "create it, or choose another path")
    if save_npy is not None and Path(save_npy).resolve() == Path(output).resolve():  # one file through a link
        raise BertfeatError(f"{opt('save_npy', str(save_npy))} is the PNG output too", "give the two outputs different names")


def _write_attention(text, output, pair, model, layer, head, save_npy, max_length, encoder, precision) -> dict:
    from .atomic import together

    enc = _encoder(model, max_length, encoder, precision)
    c = enc.config
    layer_i, head_i = check_layer_head(c.num_hidden_layers, c.num_attention_heads, layer, head)
    tokens, attn = attention_maps(text, pair, max_length=max_length, encoder=enc)
    what = f"head {head_i}" if head_i is not None else f"all {c.num_attention_heads} heads"
    if enc.precision != "fp32":  # the maps move with the precision (int8: up to 0.02 in probability): say which
        what += f" ({enc.precision})"
    with together():  # both files or neither: a failed .npy left a new (or replaced) PNG behind
        png = plot_attention(tokens, attn, output, layer_i, head_i, title=f"{enc.model_id}: layer {layer_i}, {what}")
        npy = save_attention_npy(attn, save_npy) if save_npy is not None else None
    return {
        "model": enc.model_id,
        "layer": layer_i,
        "heads": list(range(c.num_attention_heads)) if head_i is None else [head_i],
        "n_tokens": len(tokens),
        "precision": enc.precision,
        "png": str(png),
        "png_pixels": list(figure_pixels(c.num_attention_heads if head_i is None else 1)),
        "npy": None if npy is None else str(npy),
        "npy_shape": list(attn.shape),
    }


# --------------------------------------------------------------------------- fill-mask
def require_mlm_head(enc) -> None:
    from .errors import BertfeatError

    if enc.weights.mlm is None:
        if enc.weights.missing_mlm_reason:
            raise BertfeatError(enc.weights.missing_mlm_reason, "restore the checkpoint with its decoder, or set "
                                "tie_word_embeddings to true in config.json if the decoder is the word embeddings")
        if enc.config.model_type == "electra":  # its generator's head (generator_predictions.*) is not run here
            raise BertfeatError(f"{enc.model_id} has no masked-language-model head bertfeat runs (an ELECTRA "
                                "generator's head is not supported)",
                                "use a BERT-family checkpoint saved with its MLM head, e.g. bert-base-uncased")
        heads = {"roberta": "lm_head.*", "xlm-roberta": "lm_head.*", "camembert": "lm_head.*",
                 "distilbert": "vocab_transform.* / vocab_projector.*", "modernbert": "head.* / decoder.*"}
        raise BertfeatError(f"{enc.model_id} has no masked-language-model head "
                            f"({heads.get(enc.config.model_type, 'cls.predictions.*')})",
                            "use a checkpoint saved with its MLM head, e.g. bert-base-uncased")


def masked_lm_logits(text: str, pair: str | None = None, model: str | None = None, *, encoder=None,
                     positions: str = "mask", precision: str | None = None) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Masked-LM logits of one text: (tokens, positions (M,), float32 logits (M, vocab)).

    ``positions`` "mask": the rows of the [MASK] tokens (an error if there is none); "all": every position.
    """
    from .errors import BertfeatError, opt
    from .model.families import forward, mlm_head_logits

    check_texts(text, pair)
    if positions not in ("mask", "all"):  # anything else was taken for "all"
        raise BertfeatError(f"{opt('positions', positions)} is neither 'mask' nor 'all'",
                            "give positions='mask' (the [MASK] tokens' rows) or positions='all' (every position)")
    enc = _encoder(model, None, encoder, precision)
    require_mlm_head(enc)
    tok = enc.tokenizer
    if tok.mask_id is None:
        raise BertfeatError(f"{enc.model_id}: the vocabulary has no {tok.mask_token} token", "use a BERT checkpoint with [MASK] in its vocabulary")
    e, truncated, n_full = tok.tokens(text, pair, enc.max_length)
    ids, types = _model_inputs(enc, e, pair)
    if truncated:
        raise BertfeatError(f"the text has {n_full} tokens, more than the max length {enc.max_length}",
                            f"shorten the text around {tok.mask_token}")
    if positions == "mask":
        pos = np.flatnonzero(ids[0] == tok.mask_id)
        if pos.size == 0:
            raise BertfeatError(f"the text has no {tok.mask_token} token",
                                f"put {tok.mask_token} where a word should be predicted, e.g. \"The capital of France is {tok.mask_token}.\"")
    else:
        pos = np.arange(ids.shape[1])
    L = enc.config.num_hidden_layers
    fwd = forward(enc.weights, ids, types, np.ones_like(ids), keep=(L,))
    return list(e.tokens), pos, mlm_head_logits(enc.weights, fwd.hidden[L][0, pos])


def check_top_k(top_k) -> int:
    """``top_k`` as an int, before any model loads: a whole number (3.0 and NumPy integers pass; a bool, a string,
    2.5 or NaN are refused naming top_k, never truncated or left to fail as a slice index)."""
    import numbers

    from .errors import BertfeatError, opt

    whole = isinstance(top_k, numbers.Integral) or (isinstance(top_k, numbers.Real) and float(top_k).is_integer())
    if isinstance(top_k, bool) or not whole:
        raise BertfeatError(f"{opt('top_k', top_k)} is not a whole number",
                            f"give {opt('top_k')} a whole number of predictions per mask, e.g. {opt('top_k', 5)}")
    if not isinstance(top_k, numbers.Integral) and abs(float(top_k)) >= 2**31:  # 1e300: not a 301-digit message
        raise BertfeatError(f"{opt('top_k', top_k)} is out of range", "give 1 or more, up to the vocabulary size")
    return int(top_k)


def fill_mask(text: str, top_k: int = 5, model: str | None = None, pair: str | None = None, *, encoder=None,
              precision: str | None = None) -> list[list[dict]]:
    """The ``top_k`` most likely tokens for each [MASK] of ``text``, in order of the masks.

    Each mask gets a list of {"token", "id", "score"}, best first; score is the probability
    (softmax of the logits over the vocabulary). Several masks are predicted independently in one pass.
    """
    from .errors import BertfeatError, opt
    from .model.bert import softmax

    check_texts(text, pair)
    top_k = check_top_k(top_k)
    enc = _encoder(model, None, encoder, precision)
    V = enc.config.vocab_size
    if not 1 <= top_k <= V:
        raise BertfeatError(f"{opt('top_k', top_k)} is out of range", f"choose 1..{V} (the vocabulary size)")
    _, _, logits = masked_lm_logits(text, pair, encoder=enc)
    probs = softmax(logits.astype(np.float64))
    out = []
    for p, lg in zip(probs, logits):
        best = np.argsort(-lg, kind="stable")[:top_k]
        out.append([{"token": enc.tokenizer.id_to_token(i), "id": int(i), "score": float(p[i])} for i in best])
    return out
