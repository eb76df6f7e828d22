"""Where int8's error comes from: each kind of linear layer's 8-bit weights, one at a time (issue 45).

    python benchmarks/int8_error_sources.py               # all-MiniLM-L6-v2, 4,000 real sentences: a table
    python benchmarks/int8_error_sources.py --n 40 --json # a smoke test: the same rows as JSON on stdout
    python benchmarks/int8_error_sources.py --model DIR   # another checkpoint
    python benchmarks/int8_error_sources.py --precision-check-set   # the 17,511 sentences of make precision-check

int8 (bertfeat/ops/quant.py) rounds two things: the activations (per token, 8 bits) and the weights (per output
channel, 8 bits, Wq). A batch of short sequences multiplies by the weights at ~15 bits instead (Wq + Wr / RESID, two
GEMMs). This script runs the int8 forward pass as it is ("scheme"), then with one kind of linear layer (qkv,
attention_output, ffn_up, ffn_down) multiplied by the ~15-bit weights for every sequence, then all four ("all"),
and prints each variant's smallest cosine to fp32's features, the mean of 1 - cosine and how many sentences fall
below 0.999. What "all" removes is the weights' share of the error; what is left is the activations'.

Measured on a 2-core AMD EPYC Zen 5 over the 17,511 sentences of examples/precision_check.py (2026-11-29, scheme
"6"): scheme 2.36e-4 (min 0.99899), ffn_down 1.69e-4, ffn_up 2.00e-4, qkv 2.11e-4, attention_output 2.16e-4, all
0.86e-4 (min 0.99936): docs/precision.md, Quality. Needs the ``fast`` extra on a CPU with VNNI or AMX, and the
full data sets (BERTFEAT_DATA, default ../shared/data) for the sentences.
"""

from __future__ import annotations

import bertfeat  # noqa: F401  first, before NumPy: it picks OpenBLAS's kernels (see bertfeat/ops/threads.py)
import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "examples")]
from corpus import build_corpus  # noqa: E402
from precision_check import cosine_sentences, row_cosines  # noqa: E402  the 17,511 sentences, one cosine per row

from bertfeat import Encoder  # noqa: E402
from bertfeat.model import bert  # noqa: E402

KINDS = ("qkv", "attention_output", "ffn_up", "ffn_down")
#: the Int8Steps methods that make (or read) each kind's product, and where their Batch argument is
_STEPS = {"qkv": {"qkv": -1}, "attention_output": {"attn_out": -1}, "ffn_up": {"up": 2},
          "ffn_down": {"ffn_buffer": 2, "down": 3, "ffn_out": 3}}
_active: set[str] = set()
_wrapped = False  # the Int8Steps methods are wrapped (once per process)



def _at_15_bits(kind: str, name: str, where: int) -> None:
    """Wrap Int8Steps.<name> so that, while ``kind`` is active, its batch multiplies by the ~15-bit weights."""
    orig = getattr(bert.Int8Steps, name)

    def step(self, *args):
        if kind not in _active:
            return orig(self, *args)
        bt = args[where]
        levels, bt.levels = bt.levels, 2
        try:
            return orig(self, *args)
        finally:
            bt.levels = levels

    setattr(bert.Int8Steps, name, step)


def measure(model, texts: list[str]) -> list[dict]:
    """One row per variant: {"variant", "min_cosine", "mean_error", "below_0999"} against fp32's features."""
    global _wrapped
    if not _wrapped:
        for kind, steps in _STEPS.items():
            for name, where in steps.items():
                _at_15_bits(kind, name, where)
        _wrapped = True
    ref = Encoder(model).encode(texts)
    enc = Encoder(model, precision="int8")
    rows = []
    for variant in ("scheme", *KINDS, "all"):
        _active.clear()
        _active.update(KINDS if variant == "all" else () if variant == "scheme" else (variant,))
        x = enc.encode(texts)
        cos = row_cosines(x, ref)
        rows.append({"variant": variant, "min_cosine": float(cos.min()), "mean_error": float(1.0 - cos.mean()),
                     "below_0999": int((cos < 0.999).sum())})
    _active.clear()
    if rows[-1]["mean_error"] == rows[0]["mean_error"]:
        raise SystemExit(f"int8_error_sources: the ~15-bit weights changed nothing for {model or 'the default model'}: "
                         "its int8 forward pass does not run through bert.Int8Steps, so this script cannot split its "
                         "error; use a BERT-family checkpoint")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=4000, help="sentences of benchmarks/corpus.py")
    ap.add_argument("--model", default=None, help="a checkpoint folder (default all-MiniLM-L6-v2)")
    ap.add_argument("--precision-check-set", action="store_true",
                    help="the 17,511 sentences of examples/precision_check.py instead of --n of the corpus")
    ap.add_argument("--json", action="store_true", help="the rows as JSON on stdout")
    a = ap.parse_args(argv)
    rows = measure(a.model, cosine_sentences() if a.precision_check_set else build_corpus(a.n))
    if a.json:
        print(json.dumps(rows))
        return 0
    print("| products at ~15-bit weights | min cosine vs fp32 | mean 1 - cosine | below 0.999 |")
    print("|---|---:|---:|---:|")
    for r in rows:
        name = {"scheme": "none (int8 as it is)", "all": "all four kinds"}.get(r["variant"], r["variant"])
        print(f"| {name} | {r['min_cosine']:.5f} | {r['mean_error']:.3e} | {r['below_0999']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
