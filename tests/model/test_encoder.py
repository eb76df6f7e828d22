"""Encoder: sentence-transformers parity, batch invariance, poolings and layer selection against torch,
max-length defaults, long-text modes, and the STSb dev score.

Issue 2, "What it must show" 3, 5 and 7 (run with ``pytest -s`` to see the STSb number).
"""

from __future__ import annotations

import numpy as np
import pytest

from bertfeat import BertfeatError, Encoder
from bertfeat.model.inputs import LongTextError
from ckpt import (  # noqa: F401  (make_ckpt is a fixture)
    hf_tokenizer,
    make_ckpt,
    pool_rows,
    reference_model,
    row_cosines,
    single_blas_thread,
    torch_reference_rows,
    torch_threads,
)
from conftest import need, read_sst2, read_stsb

COS_TOL = 0.99999



@pytest.fixture(autouse=True)
def _one_blas_thread():
    """See ckpt.single_blas_thread: keeps NumPy fast next to torch in this process."""
    with single_blas_thread():
        yield


@pytest.fixture(scope="module")
def enc(minilm_dir):
    return Encoder(minilm_dir)


@pytest.fixture(scope="module")
def torch_minilm(minilm_dir):
    from transformers import BertModel

    return BertModel.from_pretrained(str(minilm_dir)).eval(), hf_tokenizer(minilm_dir)


@pytest.fixture(scope="module")
def long_text(sample_data) -> str:
    """A real text of about 830 word pieces."""
    sst, _ = read_sst2(sample_data / "sst2" / "stsa.binary.dev")
    return " ".join(sst[150:190])


def assert_close_rows(X, R, what, abs_tol=1e-4):
    assert X.shape == R.shape, (what, X.shape, R.shape)
    cos = row_cosines(X, R)
    assert cos.min() >= COS_TOL, f"{what}: row {int(cos.argmin())} cosine {cos.min():.7f}"
    scale = max(1.0, float(np.abs(R).max()))
    assert np.abs(X - R).max() <= abs_tol * scale, f"{what}: max |diff| {np.abs(X - R).max():.2e}"


# --------------------------------------------------------------------------- 3. sentence-transformers
@pytest.mark.live
def test_sentence_transformers_parity(enc, minilm_dir, real_sentences, long_text):
    """all-MiniLM-L6-v2 mean + normalize == SentenceTransformer.encode(normalize_embeddings=True), including
    texts cut at the model's max_seq_length 256."""
    from sentence_transformers import SentenceTransformer

    texts = list(real_sentences) + [long_text, long_text[:1500], ""]
    st = SentenceTransformer(str(minilm_dir), device="cpu")
    assert st.max_seq_length == 256
    with torch_threads(1):
        ref = st.encode(texts, normalize_embeddings=True, batch_size=64, convert_to_numpy=True)
    ours = enc.encode(texts, pooling="mean", normalize=True)
    assert ours.dtype == np.float32 and ours.shape == (len(texts), 384)
    cos = row_cosines(ours, ref)
    print(f"\nsentence-transformers parity on {len(texts)} texts: min cosine {cos.min():.8f}")
    assert cos.min() >= COS_TOL
    assert np.abs(ours - ref).max() <= 1e-5
    # the model's default pooling (1_Pooling/config.json) is mean
    assert enc.default_pooling == "mean" and "1_Pooling" in enc.pooling_source
    np.testing.assert_allclose(enc.encode(texts[:20], normalize=True), ours[:20], rtol=0, atol=1e-6)


# --------------------------------------------------------------------------- 5. invariance
def test_vector_does_not_depend_on_batch_neighbours_or_order(enc, real_sentences, long_text):
    rng = np.random.default_rng(0)
    texts = list(rng.choice(real_sentences, 61, replace=False)) + [long_text, long_text[:700], "a"]
    assert len(texts) == 64
    lens = [len(a) for a in enc.tokenizer.encode(texts, max_length=256).ids]
    assert min(lens) <= 4 and max(lens) == 256  # mixed lengths, one truncated
    batch = enc.encode(texts)
    alone = np.stack([enc.encode([t])[0] for t in texts])
    perm = rng.permutation(64)
    shuffled = enc.encode([texts[i] for i in perm])[np.argsort(perm)]
    tiny = Encoder(enc.location.path, max_batch_tokens=64).encode(texts)  # many small batches
    # on oneDNN a GEMM row does not depend on the row count, and attention scores are each sequence's own
    # (bert.own_length_scores): bit for bit; NumPy's BLAS may round a row by the batch's row count
    tol = 0.0 if enc.gemm_path.library == "onednn" else 1e-6
    for name, X in (("alone", alone), ("shuffled", shuffled), ("small batches", tiny)):
        d = np.abs(X - batch).max()
        print(f"\ninvariance, batch of 64 vs {name}: max |diff| {d:.2e} (allowed {tol:g}, {enc.gemm_path.library})")
        assert d <= tol, name
    # duplicates inside one batch get identical vectors
    dup = enc.encode([texts[5], texts[0], texts[5]])
    assert np.abs(dup[0] - dup[2]).max() <= tol and np.abs(dup[0] - batch[5]).max() <= tol


@pytest.mark.parametrize("kw", [{"pooling": "cls"}, {"pooling": "lasttoken"}, {"pooling": "max"},
                                {"pooling": "weightedmean"}, {"pooling": "mean", "layers": "-4:", "layer_agg": "concat"},
                                {"long_text": "chunk-mean", "max_length": 64}, {"long_text": "chunk-max", "max_length": 64}],
                         ids=["cls", "lasttoken", "max", "weightedmean", "layers", "chunk-mean", "chunk-max"])
def test_every_pooling_is_batch_independent(enc, real_sentences, long_text, kw):
    """Bit for bit on oneDNN for every pooling, layers and long-text mode: cls / lasttoken run the last layer at one
    token, whose (1, T) x (T, hs) context product rounded by the padded length (4.5e-7) before
    bert.own_length_context."""
    texts = list(real_sentences[:40]) + [long_text[:1500]]
    together = enc.encode(texts, **kw)
    alone = np.concatenate([enc.encode([t], **kw) for t in texts])
    tol = 0.0 if enc.gemm_path.library == "onednn" else 5e-6  # NumPy's BLAS: a few 1e-6 unnormalized (python.md)
    assert np.abs(together - alone).max() <= tol


def test_run_sets_gives_each_spec_as_run_gives_it(enc, real_sentences, long_text):
    """Several feature sets from one pass (bertfeat sweep): a set that reads whole layers is run's bit for bit; a
    one-token pooling reads the whole last layer there (run computes it at the token alone: bert.layer_at)."""
    texts = list(real_sentences[:30]) + [long_text[:1500]]
    specs = [enc.spec(), enc.spec("mean", layers=-2), enc.spec("max+mean", layers="1,-1"),
             enc.spec("mean", layers="-4:", layer_agg="concat"), enc.spec("cls"), enc.spec("pooled"),
             enc.spec("mean", normalize=True)]
    prep = enc.prepare(texts, None, specs[0])
    outs = enc.run_sets(prep, specs)
    for i, (spec, X) in enumerate(zip(specs, outs)):
        ref = enc.run(prep, spec)
        d = float(np.abs(X - ref).max())
        print(f"set {i} ({spec.pooling} {spec.layers} {spec.layer_agg}): max |diff| vs run {d:.2e}")
        if spec.pooling in ("cls", "pooled"):
            assert 0 < d <= 2e-6  # the whole last layer vs that layer at one token
        else:
            np.testing.assert_array_equal(X, ref)
    chunked = [enc.spec("mean", long_text="chunk-mean", max_length=64), enc.spec("cls", long_text="chunk-mean", max_length=64)]
    prep = enc.prepare(texts, None, chunked[0])
    X = enc.run_sets(prep, chunked)[0]
    np.testing.assert_array_equal(X, enc.run(prep, chunked[0]))  # windows combined per row for each set
    with pytest.raises(BertfeatError, match="must tokenize alike"):
        enc.run_sets(prep, [chunked[0], enc.spec("mean")])


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_long_documents_are_batch_independent(enc, real_sentences, precision):
    """Documents of 300-512 tokens batched together (a budget above the default): the products with the attention
    probabilities round by the padded length once it passes OpenBLAS's K block (~256 keys), 1.6e-7 in fp32 and
    2.5e-3 of a feature in int8 before own_length_context did them per length."""
    from bertfeat.errors import BertfeatError

    try:
        e = Encoder(enc.location.path, precision=precision, max_batch_tokens=4096, threads=1)
    except BertfeatError as err:  # int8 needs VNNI / AMX and oneDNN
        pytest.skip(str(err))
    docs = [" ".join(real_sentences[i:i + n]) for i, n in ((0, 14), (40, 17), (80, 19), (120, 21), (160, 30))]
    lens = [len(a) for a in e.tokenizer.encode(docs, max_length=512).ids]
    assert min(lens) > 256 and len(set(lens)) > 2, lens
    together = e.encode(docs, max_length=512)
    alone = np.concatenate([e.encode([d], max_length=512) for d in docs])
    tol = 0.0 if e.gemm_path.library == "onednn" else 1e-6
    print(f"{precision}, {lens} tokens: max |diff| {np.abs(together - alone).max():.3g}")
    assert np.abs(together - alone).max() <= tol


# --------------------------------------------------------------------------- poolings and layers
@pytest.fixture(scope="module")
def pooling_case(real_sentences, sample_data, torch_minilm):
    """32 mixed texts + 8 STSb pairs with torch hidden states (max_length 256, the Encoder's default)."""
    model, tok = torch_minilm
    texts = list(real_sentences[::12])[:32]
    s1, s2, _ = read_stsb(sample_data / "stsb" / "sts-dev.csv")
    pa, pb = s1[400:408], s2[400:408]
    return texts, pa, pb, torch_reference_rows(model, tok, texts, None, 256), torch_reference_rows(model, tok, pa, pb, 256)


@pytest.mark.live
@pytest.mark.parametrize("pooling", ["pooled", "cls", "mean", "max"])
def test_every_pooling_matches_torch_pooled_by_hand(enc, pooling_case, pooling):
    texts, pa, pb, rows, pair_rows = pooling_case
    assert_close_rows(enc.encode(texts, pooling=pooling), pool_rows(rows, pooling), pooling)
    assert_close_rows(enc.encode(pa, pairs=pb, pooling=pooling), pool_rows(pair_rows, pooling), f"{pooling} pairs")
    X = enc.encode(texts, pooling=pooling, normalize=True)
    R = pool_rows(rows, pooling)
    assert_close_rows(X, R / np.linalg.norm(R, axis=1, keepdims=True), f"{pooling} normalized")
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-6)


@pytest.mark.live
@pytest.mark.parametrize("pooling", ["mean", "cls", "max"])
def test_layer_selection_matches_torch_hidden_states(enc, pooling_case, pooling):
    texts, _, _, rows, _ = pooling_case
    L = enc.config.num_hidden_layers  # 6: hidden states 0..6 as transformers' hidden_states
    per_layer = {i: pool_rows(rows, pooling, layer=i) for i in range(L + 1)}
    cases = {
        -1: per_layer[6],
        -2: per_layer[5],
        0: per_layer[0],  # the embeddings
        "-4:": np.mean([per_layer[i] for i in (3, 4, 5, 6)], axis=0),
        "-4,-3,-2,-1": np.mean([per_layer[i] for i in (3, 4, 5, 6)], axis=0),
        "2:4": np.mean([per_layer[i] for i in (2, 3)], axis=0),
        (1, 6): np.mean([per_layer[1], per_layer[6]], axis=0),
    }
    for layers, R in cases.items():
        assert_close_rows(enc.encode(texts, pooling=pooling, layers=layers), R, f"{pooling} layers={layers}")
    X = enc.encode(texts, pooling=pooling, layers="-4:", layer_agg="concat")
    assert X.shape == (len(texts), 4 * 384)
    assert_close_rows(X, np.concatenate([per_layer[i] for i in (3, 4, 5, 6)], axis=1), f"{pooling} -4: concat")
    X = enc.encode(texts, pooling=pooling, layers=[-1, -2], layer_agg="concat")  # in the order given
    assert_close_rows(X, np.concatenate([per_layer[6], per_layer[5]], axis=1), f"{pooling} [-1,-2] concat")
    # layer 1 of 6 (a shallow model run) equals torch's hidden_states[1]
    assert_close_rows(enc.encode(texts[:5], pooling=pooling, layers=1), per_layer[1][:5], f"{pooling} layers=1")


def test_layer_agg_with_one_layer_is_recorded_as_the_default(enc):
    """concat (or mean) of one layer changes nothing: the spec, fingerprint and cache key are the default's (a run
    given --layer-agg concat without --layers recorded concat, a second key for the same vectors)."""
    for kwargs in ({}, {"pooling": "cls"}, {"pooling": "mean", "layers": -2}):
        assert enc.spec(layer_agg="concat", **kwargs) == enc.spec(**kwargs)
    assert enc.spec(layer_agg="concat").layer_agg == "mean"
    assert enc.spec("mean", layers="-2:", layer_agg="concat").layer_agg == "concat"  # two layers: it counts


def test_bad_pooling_and_layer_options_are_clear(enc):
    for kwargs, words in (
        (dict(pooling="avg"), ["unknown pooling='avg'", "mean"]),
        (dict(layers=7), ["layers=7 names layer 7, which does not exist", "6 layers"]),
        (dict(layers=-8), ["layers=-8 names layer -8, which does not exist"]),
        (dict(layers="x"), ["not understood"]),
        (dict(layers="3:3"), ["selects no layer"]),
        (dict(layers="9:"), ["reaches past the model", "6 layers", "or -7..-1", "e.g. -4: for the last 4"]),
        (dict(layers="7:"), ["reaches past the model"]),  # Python's slice: nothing ("selects no layer")
        (dict(layers=slice(7, None, -1)), ["reaches past the model"]),  # Python's slice: 6..0, silently
        (dict(layers="4:12"), ["layers='4:12' reaches past the model"]),  # Python's slice: 4..6, silently
        (dict(layers="-8:"), ["reaches past the model"]),
        (dict(layers=slice(0, 9)), ["reaches past the model"]),
        (dict(layers=[-1, 6]), ["layers=[-1, 6] names layer 6 twice (as -1 and 6: the model has 6 layers)",
                                "name each layer once: layers=[-1]"]),  # a list: the same rule as the string's
        (dict(layer_agg="sum"), ["unknown layer_agg='sum' - choose one of mean, concat"]),
        (dict(pooling="pooled", layers=-2), ["last layer only"]),
        (dict(long_text="drop"), ["unknown long_text='drop' - choose one of truncate"]),
        (dict(max_length=513), ["out of range", "512"]),
        (dict(max_length=2), ["out of range"]),
    ):
        with pytest.raises(BertfeatError) as e:
            enc.encode(["a text"], **kwargs)
        msg = e.value.message
        assert "\n" not in msg and " - " in msg, msg
        for w in words:
            assert w in msg, (kwargs, msg)


PROMPT_FIX = ("give the prompt as UTF-8 text (convert it first, e.g. with iconv -f latin1 -t utf-8; in Python, a str "
              "without lone surrogates, which come from a broken \\ud800-\\udfff escape or errors='surrogateescape')")
POOLING_FIX = ("choose one of pooled, cls, max, mean, mean_sqrt_len_tokens, weightedmean, lasttoken, or token poolings "
               "joined with '+' such as mean+max")
_LONG = "word " * 200  # 202 tokens with [CLS] and [SEP] in the tiny test model (max length 128)
ENCODER_OPTIONS = [  # (id, encode keywords, the same on `bertfeat extract`, the Python message, the CLI's stderr line)
    ("prompt-and-name", {"prompt": "query: ", "prompt_name": "query"}, ["--prompt", "query: ", "--prompt-name", "query"],
     "both a prompt and a prompt name were given - give prompt=TEXT or prompt_name=NAME, not both",
     "both a prompt and a prompt name were given - give --prompt TEXT or --prompt-name NAME, not both"),
    ("chunked-pairs", {"pairs": ["b", "b"], "long_text": "chunk-mean"}, ["--pair-column", "pair", "--long-text", "chunk-mean"],
     "long_text='chunk-*' works on single texts, not sentence pairs - use long_text='truncate' (or error) with pair_column",
     "--long-text chunk-* works on single texts, not sentence pairs - use --long-text truncate (or error) with --pair-column"),
    ("layers-range", {"layers": "-4:"}, ["--layers", "-4:"],  # the last four of a 2-layer model: Python would give 0..2
     "layers='-4:' reaches past the model: it has 2 layers (hidden states 0..2, or -3..-1) - "
     "choose layers in that range, e.g. -2: for the last 2",
     "--layers '-4:' reaches past the model: it has 2 layers (hidden states 0..2, or -3..-1) - "
     "choose layers in that range, e.g. -2: for the last 2"),
    ("prompt-not-unicode", {"prompt": "q\udcff: "}, ["--prompt", "q\udcff: "],  # a latin-1 byte in argv (surrogateescape)
     "prompt is not valid Unicode (byte 0xff at character 1) - " + PROMPT_FIX,
     "--prompt is not valid Unicode (byte 0xff at character 1) - " + PROMPT_FIX),
    ("layers-none", {"layers": ","}, ["--layers", ","],
     "layers=',' selects no layer - give at least one layer, e.g. -1", "--layers ',' selects no layer - give at least one layer, e.g. -1"),
    # an empty item was dropped and a repeated layer or pooling counted twice, without a word (rc 0)
    ("layers-empty-item", {"layers": "1,,2"}, ["--layers", "1,,2"],
     "layers='1,,2' has an empty item (item 2 of 3) - separate the layers by single commas: layers='1,2'",
     "--layers '1,,2' has an empty item (item 2 of 3) - separate the layers by single commas: --layers '1,2'"),
    ("layers-trailing-comma", {"layers": "-1,"}, ["--layers", "-1,"],  # said as "item 2 of 2 is empty" before
     "layers='-1,' ends with a comma (an empty last item) - remove the trailing comma: layers='-1'",
     "--layers '-1,' ends with a comma (an empty last item) - remove the trailing comma: --layers '-1'"),
    ("layers-leading-comma", {"layers": ",-2,-1"}, ["--layers", ",-2,-1"],
     "layers=',-2,-1' starts with a comma (an empty first item) - remove the leading comma: layers='-2,-1'",
     "--layers ',-2,-1' starts with a comma (an empty first item) - remove the leading comma: --layers '-2,-1'"),
    # the option was not named: "layer 7 does not exist", "unknown pooling 'foo'"
    ("layers-past-the-model", {"layers": "-1,7"}, ["--layers", "-1,7"],
     "layers='-1,7' names layer 7, which does not exist: the model has 2 layers (hidden states 0..2, or -3..-1) - "
     "choose layers in that range; -1 is the last layer, 0 the embeddings",
     "--layers '-1,7' names layer 7, which does not exist: the model has 2 layers (hidden states 0..2, or -3..-1) - "
     "choose layers in that range; -1 is the last layer, 0 the embeddings"),
    ("pooling-unknown", {"pooling": "foo"}, ["--pooling", "foo"],
     "unknown pooling='foo' - " + POOLING_FIX, "unknown --pooling 'foo' - " + POOLING_FIX),
    ("pooling-unknown-item", {"pooling": "mean+foo"}, ["--pooling", "mean+foo"],
     "unknown pooling 'foo' in pooling='mean+foo' - " + POOLING_FIX,
     "unknown pooling 'foo' in --pooling 'mean+foo' - " + POOLING_FIX),
    ("pooling-trailing-plus", {"pooling": "mean+"}, ["--pooling", "mean+"],
     "pooling='mean+' ends with a '+' (an empty last item) - remove the trailing '+': pooling='mean'",
     "--pooling 'mean+' ends with a '+' (an empty last item) - remove the trailing '+': --pooling 'mean'"),
    ("layers-repeated", {"layers": "-1,-1"}, ["--layers", "-1,-1"],
     "layers='-1,-1' names layer -1 twice - name each layer once: layers='-1'",
     "--layers '-1,-1' names layer -1 twice - name each layer once: --layers '-1'"),
    ("layers-same-by-two-numbers", {"layers": "0,2,-1"}, ["--layers", "0,2,-1"],
     "layers='0,2,-1' names layer 2 twice (as 2 and -1: the model has 2 layers) - name each layer once: layers='0,2'",
     "--layers '0,2,-1' names layer 2 twice (as 2 and -1: the model has 2 layers) - name each layer once: --layers '0,2'"),
    ("pooling-repeated", {"pooling": "mean+max+mean"}, ["--pooling", "mean+max+mean"],
     "pooling='mean+max+mean' names mean twice - name each pooling once: pooling='mean+max'",
     "--pooling 'mean+max+mean' names mean twice - name each pooling once: --pooling 'mean+max'"),
    ("pooling-empty-item", {"pooling": "mean++max"}, ["--pooling", "mean++max"],
     "pooling='mean++max' has an empty item (item 2 of 3) - join the poolings with single '+': pooling='mean+max'",
     "--pooling 'mean++max' has an empty item (item 2 of 3) - join the poolings with single '+': --pooling 'mean+max'"),
]


@pytest.mark.parametrize("kwargs,args,python,cli", [c[1:] for c in ENCODER_OPTIONS], ids=[c[0] for c in ENCODER_OPTIONS])
def test_encoder_errors_name_the_parameter_and_the_cli_the_flag(tmp_path, capsys, kwargs, args, python, cli):
    """Encoder.encode(...) names its parameters (long_text='truncate'); the same failure through
    `bertfeat extract` names the flags (--long-text truncate), in otherwise the same words."""
    from extract_util import run, tiny_encoder, tiny_model, write_csv

    with pytest.raises(BertfeatError) as e:
        tiny_encoder().encode(["ok", _LONG], **kwargs)
    assert e.value.message == python
    src = write_csv(tmp_path / "c.csv", ["text", "pair"], [["ok", "b"], [_LONG, "b"]])
    out = tmp_path / "o.parquet"
    assert run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "-q", *args) == (1, "", f"Error: {cli}\n")
    assert not out.exists()


def test_long_text_error_names_the_parameter(tmp_path, capsys):
    from extract_util import run, tiny_encoder, tiny_model, write_csv

    with pytest.raises(LongTextError) as e:
        tiny_encoder().encode(["ok", _LONG, _LONG], long_text="error")
    assert e.value.message == ("row 1 has 202 tokens, more than max length 128 (2 rows are too long) - "
                               "use long_text='truncate', chunk-mean or chunk-max, or a larger max_length")
    assert e.value.render({}) == ("row 1 has 202 tokens, more than max length 128 (2 rows are too long) - "
                                  "use --long-text truncate, chunk-mean or chunk-max, or a larger --max-length")
    # the command line reports the row of the file (a bad row), with the flags
    src = write_csv(tmp_path / "c.csv", ["text"], [["ok"], [_LONG]])
    rc, out, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "-q", "--long-text", "error")
    assert (rc, out, err) == (1, "", f"Error: {src} row 1: 202 tokens, more than max length 128 (--long-text error) - use "
                                     "--long-text truncate/chunk-mean/chunk-max or a larger --max-length, or --on-bad-row skip\n")


@pytest.mark.live
def test_checkpoint_without_pooler(make_ckpt, sample_data):
    """Every pooling but 'pooled' works (and matches torch); 'pooled' says why it is unavailable."""
    from bertfeat.cli.app import main  # noqa: F401

    d = make_ckpt(hidden=64, heads=4, layers=2, pooler=False, seed=11)
    enc = Encoder(d)
    assert enc.weights.pooler_w is None
    ref, tok = reference_model(d), hf_tokenizer(d)
    assert ref.pooler is None
    texts = ["A man is playing a guitar.", "Two dogs run across a snowy field.", "ok"]
    rows = torch_reference_rows(ref, tok, texts, None, 512)
    for p in ("cls", "mean", "max"):
        assert_close_rows(enc.encode(texts, pooling=p), pool_rows(rows, p), p)
    assert_close_rows(enc.encode(texts, pooling="mean", layers="-2:", layer_agg="concat"),
                      np.concatenate([pool_rows(rows, "mean", -2), pool_rows(rows, "mean", -1)], axis=1), "concat")
    with pytest.raises(BertfeatError) as e:
        enc.encode(texts, pooling="pooled")
    msg = e.value.message
    assert msg.startswith("pooling 'pooled' is unavailable") and "no pooler weights" in msg
    assert "pooler.dense.weight" in msg and "pooling='cls', mean or max" in msg and "\n" not in msg


def test_default_pooling_comes_from_1_pooling_config(make_ckpt):
    for st_pooling, expected in (("cls", "cls"), ("max", "max"), (None, "mean")):
        d = make_ckpt(hidden=64, heads=4, layers=2, st_pooling=st_pooling, seed=12)
        enc = Encoder(d)
        assert enc.default_pooling == expected
        if st_pooling is None:
            assert enc.pooling_source.startswith("default"), enc.pooling_source
        else:
            assert enc.pooling_source == "1_Pooling/config.json", enc.pooling_source
        texts = ["first text here", "second"]
        np.testing.assert_array_equal(enc.encode(texts), enc.encode(texts, pooling=expected))
        assert enc.spec().pooling == expected


def test_encode_edge_inputs(enc):
    X = enc.encode([])
    assert X.shape == (0, 384) and X.dtype == np.float32
    assert enc.encode([], layers="-2:", layer_agg="concat").shape == (0, 768)
    info = enc.encode([], return_info=True)
    assert info.features.shape == (0, 384) and info.n_tokens.shape == (0,)
    one = enc.encode("one text")  # one string, one vector (as SentenceTransformer.encode)
    assert one.shape == (384,)
    np.testing.assert_allclose(one, enc.encode(["one text"])[0], rtol=0, atol=1e-6)
    np.testing.assert_allclose(enc.encode("a", pairs="b"), enc.encode(["a"], pairs=["b"])[0], rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="2 texts but 1 pairs"):
        enc.encode(["a", "b"], pairs=["c"])


# --------------------------------------------------------------------------- max length
def test_max_length_defaults(enc, make_ckpt):
    assert enc.default_max_length == 256 and enc.max_length == 256  # sentence_bert_config.json
    assert enc.spec().max_length == 256
    d = make_ckpt(hidden=64, heads=4, layers=2, seed=13)  # no sentence_bert_config.json
    assert Encoder(d).max_length == 512
    d = make_ckpt(hidden=64, heads=4, layers=2, max_position=128, seed=13)
    assert Encoder(d).max_length == 128
    # sentence_bert_config.json is read beside a modules.json only (as sentence-transformers reads it)
    d = make_ckpt(hidden=64, heads=4, layers=2, max_position=128, st_max_seq_length=1000, st_pooling="mean", seed=13)
    assert Encoder(d).max_length == 128  # never past the position table
    d = make_ckpt(hidden=64, heads=4, layers=2, st_max_seq_length=64, st_pooling="mean", seed=13)
    e = Encoder(d)
    assert e.max_length == 64
    assert Encoder(d, max_length=100).max_length == 100
    with pytest.raises(BertfeatError, match="out of range"):
        Encoder(d, max_length=600)


@pytest.mark.live
def test_tokenizer_json_padding_and_truncation_do_not_leak(enc, torch_minilm):
    """all-MiniLM-L6-v2's tokenizer.json pads and truncates to 128; a 200-token text keeps its 200 tokens,
    and a 3-token text is not padded."""
    import json

    tj = json.loads((enc.location.path / "tokenizer.json").read_text())
    assert tj["truncation"]["max_length"] == 128 and tj["padding"]["strategy"] == {"Fixed": 128}
    model, tok = torch_minilm
    text = " ".join(["word"] * 150 + ["hello world"] * 24)
    ref_ids = tok(text)["input_ids"]
    assert len(ref_ids) == 200
    t = enc.tokenizer.encode([text, "hi"])
    assert t.ids[0].tolist() == ref_ids and t.n_tokens.tolist() == [200, 3] and not t.truncated.any()
    assert t.ids[1].tolist() == tok("hi")["input_ids"]
    info = enc.encode([text, "hi"], return_info=True)
    assert info.n_tokens.tolist() == [200, 3] and info.truncated.tolist() == [False, False]
    # the vector is the mean over all 200 tokens (torch), not over the first 128
    full = torch_reference_rows(model, tok, [text], None, 512)
    cut = torch_reference_rows(model, tok, [text], None, 128)
    assert row_cosines(info.features[:1], pool_rows(full, "mean")).min() >= COS_TOL
    assert row_cosines(info.features[:1], pool_rows(cut, "mean")).min() < 0.9999


# --------------------------------------------------------------------------- long texts
@pytest.mark.live
def test_long_text_modes(enc, long_text, torch_minilm):
    texts = ["short one", long_text, "another short text"]
    n_long = len(enc.tokenizer.encode([long_text], max_length=256).ids[0])
    info = enc.encode(texts, pooling="mean", return_info=True)  # truncate (default); plain mean, not normalized
    assert info.truncated.tolist() == [False, True, False]
    assert info.n_tokens[1] > 800 and n_long == 256
    assert info.n_chunks.tolist() == [1, 1, 1]
    model, tok = torch_minilm
    assert_close_rows(info.features[1:2], pool_rows(torch_reference_rows(model, tok, [long_text], None, 256), "mean"),
                      "truncated at 256")
    X = enc.encode(texts, max_length=512, return_info=True)
    assert X.truncated.tolist() == [False, True, False]
    assert not enc.encode(texts, max_length=512, return_info=True).truncated[0]

    with pytest.raises(LongTextError) as e:
        enc.encode(texts, long_text="error")
    assert isinstance(e.value, BertfeatError)
    assert e.value.rows.tolist() == [1]
    assert e.value.message.startswith(f"row 1 has {info.n_tokens[1]} tokens, more than max length 256")
    assert "long_text='truncate'" in e.value.message and "\n" not in e.value.message
    # the two short rows, without the 256-token row beside them: padded to 5 instead of 256 tokens, so the
    # float32 attention products round differently (1.05e-6 here on oneDNN's fp32 GEMMs, 9.5e-7 on OpenBLAS's)
    np.testing.assert_allclose(enc.encode(texts[::2], pooling="mean", long_text="error"), info.features[::2], rtol=0, atol=2e-6)

    chunked = enc.encode(texts, pooling="mean", long_text="chunk-mean", return_info=True)
    width, stride = 254, 32
    content = info.n_tokens[1] - 2
    assert chunked.n_chunks.tolist() == [1, -(-(content - width) // (width - stride)) + 1, 1]
    assert chunked.truncated.tolist() == [False, False, False]
    # the short rows batched beside other windows than before: the same float32 attention rounding as above (1.07e-6)
    np.testing.assert_allclose(chunked.features[::2], info.features[::2], atol=2e-6)
    assert 0.5 < row_cosines(chunked.features[1:2], info.features[1:2])[0] < 0.99999
    cmax = enc.encode(texts, pooling="mean", long_text="chunk-max")
    assert (cmax[1] >= chunked.features[1] - 1e-5).all()  # element-wise max of windows >= their mean
    with pytest.raises(BertfeatError, match="not sentence pairs"):
        enc.encode(texts, pairs=texts, long_text="chunk-mean")


# --------------------------------------------------------------------------- 7. STSb
def test_stsb_dev_spearman(enc, full_data):
    spearmanr = need("scipy.stats").spearmanr

    s1, s2, gold = read_stsb(full_data / "stsb" / "sts-dev.csv")
    assert len(gold) == 1500
    unique = list(dict.fromkeys(s1 + s2))
    X = enc.encode(unique, pooling="mean", normalize=True)
    idx = {t: i for i, t in enumerate(unique)}
    a, b = X[[idx[t] for t in s1]], X[[idx[t] for t in s2]]
    cos = (a * b).sum(1)
    rho = spearmanr(cos, gold).statistic * 100
    print(f"\nSTSb dev Spearman x 100, all-MiniLM-L6-v2 mean + normalize: {rho:.2f} (published 86.72)")
    assert rho >= 86.5


def test_encode_refuses_inputs_it_would_misread(enc):
    """A DataFrame iterates over its column names, a dict over its keys, a 0-d array not at all, a set in its strings'
    hash order (another in every process, so its rows came back in no order the caller knew): a one-column DataFrame
    or (n, 1) array is read as its column (as TextFeatures does; the array was refused, its repr over lines), the others are refused naming what they are; a lone surrogate (not
    valid Unicode) is refused naming its index instead of reaching the tokenizer's TypeError."""
    pd = pytest.importorskip("pandas")
    texts = ["a film", "another one"]
    np.testing.assert_array_equal(enc.encode(pd.DataFrame({"text": texts})), enc.encode(texts))
    column = np.array(texts, dtype=object).reshape(-1, 1)  # df[["text"]].to_numpy(): read as its column, as TextFeatures
    np.testing.assert_array_equal(enc.encode(column), enc.encode(texts))
    cases = [
        (np.array([texts, texts]), "texts is an array of shape (2, 2), not a list of strings - pass a 1-D array (or an "
                                   "(n, 1) column) of strings"),
        (pd.DataFrame({"a": ["x"], "b": ["y"]}), "texts is a DataFrame of 2 columns, not a list of strings - pass its text "
                                                 "column, e.g. df['text']"),
        ({"x": "a film"}, "texts is {'x': 'a film'} (dict), not a list of strings - pass a list of strings (drop or fill "
                          "missing texts first)"),
        (np.array("hello"), "texts is array('hello', dtype='<U5') (ndarray), not a list of strings - pass a list of "
                            "strings (drop or fill missing texts first)"),
        ({"b", "a"}, "texts is a set (no order, so no rows), not a list of strings - pass a list, e.g. sorted(texts)"),
        (["ok", "bad \udc80 text"], "unpaired surrogate U+DC80 at character 4 of the texts[1]: not valid Unicode (a JSON "
                                    "\\udc80 escape without its pair) - encode the text from valid Unicode (a lone "
                                    "surrogate comes from a broken \\ud800-\\udfff escape or from decoding with "
                                    "errors='surrogateescape')"),
    ]
    for value, message in cases:
        with pytest.raises(BertfeatError) as e:
            enc.encode(value)
        assert e.value.message == message


@pytest.mark.parametrize("kwargs,message", [
    ({"prompt": 3}, "prompt is 3 (int), not a string - give prompt as text, e.g. prompt='query: '"),
    ({"prompt_name": b"q"}, "prompt_name is b'q' (bytes), not a string - give prompt_name as text, e.g. prompt_name='query'"),
    ({"normalize": "no"}, "normalize='no' is not True, False or None - give normalize=True or normalize=False (None: the "
                          "model's own choice)"),
    ({"normalize_embeddings": "False"}, "normalize_embeddings='False' is not True, False or None - give "
                                        "normalize_embeddings=True or normalize_embeddings=False"),
    ({"pooling": ""}, "pooling='' names no pooling - give one such as pooling='mean', or None for the model's own "
                      "embedding"),
    ({"long_text": "chunk-mean", "stride": "x"}, "stride='x' is not a number - choose 0 or more (tokens shared by "
                                                 "neighbouring windows), or leave it out for the default"),
    ({"long_text": "chunk-mean", "stride": 2.7}, "stride=2.7 is not a whole number - choose 0 or more (tokens shared by "
                                                 "neighbouring windows), or leave it out for the default"),
    ({"max_length": 3.5}, "max_length=3.5 is not a whole number - choose 3 or more (up to the model's "
                          "max_position_embeddings, 512 for BERT and MiniLM), or leave it out for the default"),
    ({"batch_size": 1.5}, "batch_size=1.5 is not a whole number - choose 1 or more (rows per batch at most), or leave it "
                          "out for the default"),
    ({"batch_size": 0}, "batch_size=0 is out of range - choose 1 or more (rows per batch at most), or leave it out for "
                        "the default"),
    ({"layers": 1.0}, "layers=1.0 is not a layer selection - give an int, a list of ints, a slice, or a string like '-1', "
                      "'-4,-3,-2,-1' or '-4:' (0 = embeddings)"),
    ({"layers": [1.5]}, "layers=[1.5] is not a layer selection - give an int, a list of ints, a slice, or a string like "
                        "'-1', '-4,-3,-2,-1' or '-4:' (0 = embeddings)"),
])
def test_encode_options_of_the_wrong_type_are_refused_not_coerced(enc, kwargs, message):
    """"no" is truthy ("False" as normalize_embeddings normalized), 3.5 truncates to 3, "" pools as mean: such values are refused with the parameter's name, not
    silently turned into something else (or a raw TypeError from deep inside)."""
    with pytest.raises(BertfeatError) as e:
        enc.encode(["a text here"], **kwargs)
    assert e.value.message == message


def test_layers_as_a_slice(enc):
    """layers=slice(-2, None) is the last two hidden states, as the string '-2:' is."""
    np.testing.assert_array_equal(enc.encode(["a text"], layers=slice(-2, None)), enc.encode(["a text"], layers="-2:"))
    # down to the embeddings: the stop one past hidden state 0 is in range going down (it was refused)
    np.testing.assert_array_equal(enc.encode(["a text"], layers=slice(-1, -8, -1), layer_agg="concat"),
                                  enc.encode(["a text"], layers=[6, 5, 4, 3, 2, 1, 0], layer_agg="concat"))


def test_encode_takes_a_one_column_pyarrow_table(enc):
    pa = pytest.importorskip("pyarrow")
    texts = ["a film", "another one"]
    np.testing.assert_array_equal(enc.encode(pa.table({"t": texts})), enc.encode(texts))
    with pytest.raises(BertfeatError, match="texts is a Table of 2 columns, not a list of strings"):
        enc.encode(pa.table({"t": texts, "u": texts}))


def test_a_pyarrow_column_is_a_list_of_texts_and_empty_texts_keep_their_checks():
    """Found by the API audit: a pyarrow Array / ChunkedArray (a Table's column, which TextFeatures took) was refused
    as 'texts[0] is <pyarrow.StringScalar ...>, not a string ... (drop or fill missing texts first)'; with no texts,
    pairs of another length and a batch_size out of range were taken (refused only once the input was not empty);
    return_info='no' (truthy) returned an EncodeResult."""
    import pyarrow as pa
    from extract_util import tiny_encoder

    enc = tiny_encoder()
    want = enc.encode(["a cat", "a dog"])
    table = pa.table({"text": ["a cat", "a dog"]})
    assert np.array_equal(enc.encode(table["text"]), want)  # ChunkedArray
    assert np.array_equal(enc.encode(pa.array(["a cat", "a dog"])), want)
    with pytest.raises(BertfeatError, match=r"^texts\[1\] is None, not a string"):
        enc.encode(pa.array(["a cat", None]))
    with pytest.raises(BertfeatError, match=r"^0 texts but 2 pairs - give one pair text for each text$"):
        enc.encode([], pairs=["a", "b"])
    with pytest.raises(BertfeatError, match=r"^batch_size=-5 is out of range"):
        enc.encode([], batch_size=-5)
    with pytest.raises(BertfeatError, match=r"^return_info='no' is not True or False - give return_info=True or "
                                            r"return_info=False$"):
        enc.encode(["a"], return_info="no")
    assert enc.encode([], batch_size=4).shape == (0, want.shape[1])


def test_the_names_that_moved_out_of_encoder_still_import_from_it():
    """FeatureSpec moved to spec.py and the errors naming rows to inputs.py (docs name them there now); code that
    imports them from bertfeat.model.encoder, as docs and earlier releases did, gets the same objects, and an error
    still pickles whole (a Dask worker sends it to the client)."""
    import pickle

    from bertfeat.model import encoder, inputs, spec

    for name in ("LongTextError", "NoTokensError", "NonFiniteFeaturesError", "TokenPastTableError", "RowsError",
                 "text_list", "check_pairs_long_text"):
        assert getattr(encoder, name) is getattr(inputs, name), name
    assert encoder.FeatureSpec is spec.FeatureSpec and encoder.LONG_TEXT_MODES == spec.LONG_TEXT_MODES
    e = pickle.loads(pickle.dumps(encoder.NoTokensError.at([3, 5])))
    assert type(e) is inputs.NoTokensError and e.rows == (3, 5) and e.message.startswith("texts[3], texts[5]: ")


def test_switches_take_1_and_0_as_extract_does(enc):
    """extract(normalize=1) ran while Encoder.encode(normalize=1) and return_info=1 were refused: every switch of the
    Python API takes True / False and 1 / 0 (NumPy's too), the same vectors; 2 or a string is refused alike."""
    import numpy as np

    from bertfeat.checks import check_switch

    texts = ["a text here", "another one"]
    np.testing.assert_array_equal(enc.encode(texts, normalize=1), enc.encode(texts, normalize=True))
    np.testing.assert_array_equal(enc.encode(texts, normalize=np.int64(0)), enc.encode(texts, normalize=False))
    np.testing.assert_array_equal(enc.encode(texts, normalize_embeddings=1), enc.encode(texts, normalize=True))
    assert not np.allclose(enc.encode(texts, normalize=0), enc.encode(texts, normalize=1))
    assert enc.encode(texts, return_info=1).features.shape == (2, enc.output_dim(enc.spec()))
    with pytest.raises(BertfeatError) as e:
        enc.encode(texts, normalize=0, normalize_embeddings=1)
    assert e.value.message == "normalize=False and normalize_embeddings=True disagree - give one of them"
    for bad in (2, -1, "1", 1.0):
        with pytest.raises(BertfeatError, match="is not True"):
            enc.encode(texts, normalize=bad)
        with pytest.raises(BertfeatError, match="is not True or False"):
            check_switch(bad, "return_info")

