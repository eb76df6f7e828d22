"""``bertfeat tokens``, ``bertfeat attention`` and ``bertfeat fill-mask``: thin Typer wrappers.

Each validates its options, calls one function of ``bertfeat.inspection`` and renders the result
with rich. Errors are ``BertfeatError``; ``app.main`` prints them as ``Error: what - fix``, exit 1.
``app._register_optional`` calls ``register(app)``.
"""

from __future__ import annotations

import json
from typing import Optional

import typer

from ..errors import BertfeatError, json_visible, visible

MODEL_HELP = "Model: a local directory, a hub id in the Hugging Face cache, or all-MiniLM-L6-v2 (default)."


def _consoles():
    from ..console import err_console, out_console

    return out_console, err_console


def _text(s) -> "object":
    from rich.text import Text

    return Text(visible(str(s)))  # never rich markup: wordpieces like [CLS] or [unused0] must print as they are


def _json(obj) -> str:
    """``--json``'s text: non-ASCII as it is (a wordpiece reads as the model's), a C1 control, DEL or bidi control as
    a JSON escape (json.dumps escapes C0 alone): the same value, never driving the terminal it is printed on."""
    return json_visible(json.dumps(obj, ensure_ascii=False, indent=2))


ARGUMENT_FIX = ("pass the text as UTF-8 (convert it first, e.g. with iconv -f latin1 -t utf-8), or put it in a file "
                "and run `bertfeat extract FILE --encoding ENCODING`")


def _check_arguments(text: str, pair: str | None) -> None:
    """A text given on the command line in another encoding than UTF-8 (its bytes kept as lone surrogates by
    Python's argv decoding) is refused, naming the argument, before any model loads."""
    from ..checks import invalid_unicode

    for label, value in (("the TEXT argument", text), ("--pair", pair)):
        where = invalid_unicode(value) if value is not None else None
        if where:
            raise BertfeatError(f"{label} is not valid UTF-8 ({where})", ARGUMENT_FIX)


PRECISION_HELP = "fp32 (default), bf16, int8 or auto: the encoder's linear layers, as for extract (docs/precision.md)."
#: as stmodules.read_pipeline resolves it (Encoder.max_length; `bertfeat info` shows max_length and its source)
MAX_LENGTH_HELP = ("Max tokens (default: the model's max_seq_length, else its tokenizer's model_max_length, else "
                   "its max positions, never more than those; bertfeat info shows it and its source).")


def tokens_command(
    text: str = typer.Argument(..., help="The text to tokenize."),
    pair: Optional[str] = typer.Option(None, "--pair", help="Second text of a sentence pair (token type id 1, "
                                       "or 0 for a model whose tokenizer gives no token_type_ids)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help=MODEL_HELP),
    max_length: Optional[int] = typer.Option(None, "--max-length", help=MAX_LENGTH_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
):
    """Show how a text is cut into wordpieces: ids, token type ids (as the model receives them), attention mask,
    truncation."""
    from ..inspection import tokenize_text
    from ..checks import check_max_length

    _check_arguments(text, pair)
    check_max_length(max_length)

    d = tokenize_text(text, pair, model, max_length)
    if json_out:
        typer.echo(_json(d))
        return
    from rich.table import Table

    out, _ = _consoles()
    t = Table(title=_text(f"bertfeat tokens: {d['model']}"))
    for col in ("position", "wordpiece", "id", "token type id", "attention mask"):
        t.add_column(col, justify="left" if col == "wordpiece" else "right")
    for i, (tok, tid, tt, m) in enumerate(zip(d["tokens"], d["input_ids"], d["token_type_ids"], d["attention_mask"])):
        t.add_row(str(i), _text(tok), str(tid), str(tt), str(m))
    out.print(t)
    if d["truncated"]:
        line = f"truncated: {d['n_tokens_full']} tokens cut to {d['n_tokens']} (max length {d['max_length']})"
    else:
        line = f"not truncated: {d['n_tokens']} tokens (max length {d['max_length']})"
    out.print(line, markup=False, highlight=False, soft_wrap=True)


def attention_command(
    text: str = typer.Argument(..., help="The text whose attention to plot."),
    output: str = typer.Option(..., "-o", "--output", help="PNG file to write."),
    pair: Optional[str] = typer.Option(None, "--pair", help="Second text of a sentence pair (token type id 1)."),
    layer: int = typer.Option(-1, "--layer", help="Layer, 0-based; negative counts from the end (-1 = last)."),
    head: Optional[int] = typer.Option(None, "--head", help="One head, 0-based (default 0); negative counts from the end."),
    all_heads: bool = typer.Option(False, "--all-heads", help="A grid of every head of the layer."),
    save_npy: Optional[str] = typer.Option(None, "--save-npy", help="Also write the raw (layers, heads, T, T) float32 array as .npy."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help=MODEL_HELP),
    max_length: Optional[int] = typer.Option(None, "--max-length", help=MAX_LENGTH_HELP),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace existing output files (else refused)."),
    precision: str = typer.Option("fp32", "--precision", help=PRECISION_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing on success."),
):
    """Plot attention probabilities as heatmaps with the tokens on both axes."""
    from ..inspection import write_attention
    from ..checks import check_max_length, check_output_name

    _check_arguments(text, pair)
    if head is not None and all_heads:
        raise BertfeatError("--head and --all-heads exclude each other", "give --head N for one head, or --all-heads for the grid")
    check_max_length(max_length)
    check_output_name(output, "output", "attention.png")
    if save_npy is not None:
        check_output_name(save_npy, "--save-npy file", "attention.npy", option="save_npy")
    # write_attention checks the names (a folder that does not exist is refused, not made), then holds each output's
    # run lock and refuses an existing one unless --overwrite (its fix names -o or --save-npy)
    r = write_attention(text, output, pair, model, layer, None if all_heads else (0 if head is None else head),
                        save_npy, max_length, precision=precision, overwrite=overwrite)
    if quiet:
        return
    _, err = _consoles()  # "wrote ..." goes to stderr, as for every command that writes files
    heads = f"head {r['heads'][0]}" if len(r["heads"]) == 1 else f"{len(r['heads'])} heads"
    w, h = r["png_pixels"]
    prec = "" if r["precision"] == "fp32" else f", {r['precision']}"
    err.print(f"wrote {r['png']} (layer {r['layer']}, {heads}, {r['n_tokens']} tokens{prec}, {w}x{h} px)", markup=False,
              highlight=False, soft_wrap=True)
    if r["npy"]:
        shape = " x ".join(str(n) for n in r["npy_shape"])
        err.print(f"wrote {r['npy']} (float32{prec}, layers x heads x T x T = {shape})", markup=False, highlight=False,
                  soft_wrap=True)


def fill_mask_command(
    text: str = typer.Argument(..., help='Text with one or more mask tokens ([MASK], or <mask> in RoBERTa-style '
                               'models), e.g. "The capital of France is [MASK]."'),
    top_k: int = typer.Option(5, "--top-k", "-k", help="Predictions per mask token."),
    pair: Optional[str] = typer.Option(None, "--pair", help="Second text of a sentence pair (token type id 1)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help=MODEL_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print JSON (a list per mask token of token, id, score) instead of tables."),
    precision: str = typer.Option("fp32", "--precision", help=PRECISION_HELP),
):
    """Predict the tokens behind [MASK] (the model's mask token) with its masked-language-model head."""
    from ..inspection import fill_mask
    from ..model.encoder import Encoder

    _check_arguments(text, pair)
    if top_k < 1:
        raise BertfeatError(f"--top-k {top_k} is out of range", "give 1 or more")
    enc = Encoder(model, precision=precision)
    preds = fill_mask(text, top_k, pair=pair, encoder=enc)  # past the vocabulary: "--top-k N is out of range"
    if json_out:
        typer.echo(_json(preds))
        return
    from rich.table import Table

    out, _ = _consoles()
    for n, cands in enumerate(preds, 1):
        t = Table(title=_text(f"{enc.tokenizer.mask_token} {n} of {len(preds)}"))  # <mask> in RoBERTa-style models
        t.add_column("rank", justify="right")
        t.add_column("token")
        t.add_column("id", justify="right")
        t.add_column("probability", justify="right")
        for rank, c in enumerate(cands, 1):
            t.add_row(str(rank), _text(c["token"]), str(c["id"]), f"{c['score']:.4f}")
        out.print(t)


def register(app: typer.Typer) -> None:
    app.command("tokens", epilog='Examples:\n\n  bertfeat tokens "Unaffable cats purr." --pair "Do they?"\n\n'
                '  bertfeat tokens "a long text ..." --max-length 128 --json')(tokens_command)
    app.command("attention", epilog='Examples:\n\n  bertfeat attention "The cat sat on the mat." --layer -1 --head 3 -o attn.png\n\n'
                '  bertfeat attention "The cat sat." --pair "It did." --all-heads -o heads.png --save-npy attn.npy'
                )(attention_command)
    app.command("fill-mask", epilog='Examples:\n\n  bertfeat fill-mask "The capital of France is [MASK]." -m bert-base-uncased\n\n'
                '  bertfeat fill-mask "[MASK] is the capital of [MASK]." -m bert-base-uncased --json')(fill_mask_command)
