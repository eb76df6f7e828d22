"""Property tests: whatever the input, `bertfeat extract` ends with exit 0 and a correct output, or
exit 1 and one clean `Error:` line (and nothing left behind) - never a traceback.

Runs in-process through ``bertfeat.cli.app.main`` with the small random-weight model of tests/ckpt.py.
"""

from __future__ import annotations

import csv
import io
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertfeat.readers.textcheck import text_reason
from extract_util import assert_close, embeddings, metadata, no_leftovers, read_table, run, tiny_encoder, tiny_model

SETTINGS = settings(max_examples=int(os.environ.get("BERTFEAT_FUZZ_EXAMPLES", 40)), deadline=None,
                    derandomize=not os.environ.get("BERTFEAT_FUZZ_EXAMPLES"),
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
# pyarrow reports some handler failures as "Exception ignored ..." tracebacks on stderr: those are failures too
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")

PIECES = [b"a", b"hello", b" ", b",", b'"', b"\n", b"\r", b"\r\n", b"\t", b"\xff", b"\xc3\xa9", b"\xe9", b"\xc3",
          b"x y", b"\x00", b"{}", b"id", b"text", b"\xef\xbb\xbf", b"\\"]
HEADERS = [b"id,text\n", b"text\n", b"text,id\r\n", b'"text"\n', b"a,b\n", b"", b"text,text\n", b"\xef\xbb\xbftext\n"]


# reasons of rows whose text pyarrow reads otherwise than it is written: a quote that swallowed lines or was followed
# by more text, a part of a line a CR alone cut, the header line again
NOT_AS_PYARROW_READS = ("unclosed quote", "text after a closing quote", "part of a line that a carriage return alone",
                        "the header line again")


def _rejects(path):
    if not path.exists():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def check_clean_failure(rc, err, out):
    assert rc == 1, err
    assert "Traceback" not in err
    assert err.startswith("Error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert " - " in err  # what went wrong - how to fix it
    assert no_leftovers(out) == []


def extract_or_clean_failure(capsys, src, out, *args):
    """``bertfeat extract SRC -o OUT --model tiny -q ARGS``: None after a clean failure (check_clean_failure), else
    the output table, its metadata and the rejects file's rows, the run having printed nothing."""
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), *args, "-q")
    if rc != 0:
        check_clean_failure(rc, err, out)
        return None
    assert err == ""
    return read_table(out), metadata(out), _rejects(out.parent / (out.name + ".rejects.csv"))


@SETTINGS
@given(header=st.sampled_from(HEADERS), body=st.lists(st.sampled_from(PIECES), max_size=40).map(b"".join),
       policy=st.sampled_from(["error", "skip"]), chunk=st.integers(1, 4))
def test_random_csv_bytes(tmp_path_factory, capsys, header, body, policy, chunk):
    d = tmp_path_factory.mktemp("fuzz")
    src, out = d / "in.csv", d / "o.parquet"
    src.write_bytes(header + body)
    got = extract_or_clean_failure(capsys, src, out, "--chunk-rows", chunk, "--on-bad-row", policy)
    if got is None:
        return
    t, meta, rejects = got
    if policy == "error":
        assert rejects == []
    rows = t.column("row").to_pylist()
    rejected = [int(r["row"]) for r in rejects]
    # every row is written or rejected, once, in order
    assert rows == sorted(rows) and rejected == sorted(rejected)
    assert sorted(rows + rejected) == list(range(meta["rows"]["read"]))
    assert (meta["rows"]["written"], meta["rows"]["rejected"]) == (len(rows), len(rejected))
    if meta["rows"]["read"] == 0:  # a header alone: nothing to read back (pyarrow refuses a header with no newline)
        return
    # the text of each row, read independently: pyarrow drops malformed lines, the others keep their order
    # (a row with an unclosed quote may be malformed to pyarrow or not: the rows pyarrow skips are recorded; the rows
    # bertfeat rejects for what pyarrow reads otherwise than written are NOT_AS_PYARROW_READS)
    skipped = set()

    def handler(r):
        skipped.add(r.number - 2)  # records from 1, the header included
        return "skip"

    # read as latin-1 (pyarrow transcodes it to UTF-8 first): a malformed line that is not valid UTF-8 reaches the
    # handler (in UTF-8, pyarrow fails decoding it for the handler), and each cell's bytes come back exactly below
    data = src.read_bytes()  # a UTF-8 BOM is not part of the header (pyarrow skips it in UTF-8, not in latin-1)
    table = pcsv.read_csv(io.BytesIO(data[3:] if data.startswith(b"\xef\xbb\xbf") else data), read_options=pcsv.ReadOptions(use_threads=False, encoding="latin-1"),
                          parse_options=pcsv.ParseOptions(newlines_in_values=True, invalid_row_handler=handler),
                          convert_options=pcsv.ConvertOptions(column_types={meta["text_column"]: pa.binary()},
                                                              include_columns=[meta["text_column"]],
                                                              strings_can_be_null=False, quoted_strings_can_be_null=False))
    cells = [c.decode("utf-8").encode("latin-1") for c in table.column(0).to_pylist()]
    assert {int(r["row"]) for r in rejects if r["reason"].startswith("malformed line")} <= skipped
    malformed = skipped
    well_formed = [r for r in range(meta["rows"]["read"]) if r not in malformed]
    assert len(cells) == len(well_formed)
    text_of = dict(zip(well_formed, cells))
    for r in rejects:
        if int(r["row"]) in malformed or r["reason"].startswith(NOT_AS_PYARROW_READS):
            continue
        raw = text_of[int(r["row"])]
        try:
            s = raw.decode("utf-8")
        except UnicodeDecodeError:
            assert r["reason"].startswith("invalid UTF-8 at byte "), r
            continue
        assert r["reason"] == ("empty text" if s == "" else "whitespace-only text" if not s.strip()
                               else text_reason(s).text), (r, s)
    texts = [text_of[r].decode("utf-8") for r in rows]
    assert all(s.strip() for s in texts)
    assert_close(embeddings(t), tiny_encoder().encode(texts) if texts else np.zeros((0, 32), np.float32))


TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=25)


@SETTINGS
@given(texts=st.lists(st.one_of(TEXT, st.sampled_from(["", " ", "\t\n", "ok"])), min_size=1, max_size=10),
       fmt=st.sampled_from(["csv", "jsonl", "parquet"]), policy=st.sampled_from(["error", "skip"]),
       chunk=st.integers(1, 4))
def test_random_text(tmp_path_factory, capsys, texts, fmt, policy, chunk):
    d = tmp_path_factory.mktemp("fuzz")
    src, out = d / f"in.{fmt}", d / "o.parquet"
    ids = [f"id-{i}" for i in range(len(texts))]
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf)  # \r\n line ends, so fields holding \r or \n are quoted
        w.writerow(["id", "text"])
        w.writerows(zip(ids, texts))
        src.write_text(buf.getvalue(), encoding="utf-8", newline="")
    elif fmt == "jsonl":
        src.write_text("".join(json.dumps({"id": i, "text": s}) + "\n" for i, s in zip(ids, texts)), encoding="utf-8")
    else:
        pq.write_table(pa.table({"id": ids, "text": texts}), src)
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--id-column", "id",
                     "--chunk-rows", chunk, "--on-bad-row", policy, "-q")
    # missing values (empty, whitespace-only) are bad rows; any other text (control characters included: issue 44) is
    # encoded as Encoder.encode encodes it (TEXT holds no lone surrogate, the one text refused)
    bad = {i: ("empty text" if s == "" else "whitespace-only text") for i, s in enumerate(texts) if not s.strip()}
    if policy == "error" and bad:
        first = min(bad)
        check_clean_failure(rc, err, out)
        assert err == (f"Error: {src} row {first}: {bad[first]} - fix the row, or pass --on-bad-row skip to write it to "
                       "the rejects file and go on\n")
        return
    assert (rc, err) == (0, "")
    t = read_table(out)
    good = [i for i in range(len(texts)) if i not in bad]
    assert t.column("id").to_pylist() == [ids[i] for i in good]
    assert_close(embeddings(t), tiny_encoder().encode([texts[i] for i in good]) if good else np.zeros((0, 32), np.float32))
    assert [(int(r["row"]), r["id"], r["reason"]) for r in _rejects(d / "o.parquet.rejects.csv")] == \
        [(i, ids[i], bad[i]) for i in sorted(bad)]


JSON_PIECES = [b'{"text": ', b'{"id": 1, "text": ', b'"a b"', b'"\\u00e9"', b'""', b'" "', b"null", b"1", b"}", b"\n", b"\r\n",
               b"\xff", b"[", b"]", b'"', b",", b'{"id": "x", "text": "y"}\n', b'{"text": "ok"}\n', b"\xef\xbb\xbf", b" "]


@SETTINGS
@given(body=st.lists(st.sampled_from(JSON_PIECES), max_size=30).map(b"".join), policy=st.sampled_from(["error", "skip"]),
       with_id=st.booleans(), chunk=st.integers(1, 3))
def test_random_jsonl_bytes(tmp_path_factory, capsys, body, policy, with_id, chunk):
    d = tmp_path_factory.mktemp("fuzz")
    src, out = d / "in.jsonl", d / "o.parquet"
    src.write_bytes(body)
    got = extract_or_clean_failure(capsys, src, out, "--chunk-rows", chunk, "--text-column", "text", "--on-bad-row",
                                   policy, *(["--id-column", "id"] if with_id else []))
    if got is None:
        return
    t, meta, rejects = got
    assert policy == "skip" or rejects == []
    lines = [line for line in body.removeprefix(b"\xef\xbb\xbf").split(b"\n") if line.strip()]
    assert meta["rows"]["read"] == len(lines)
    rejected = [int(r["row"]) for r in rejects]
    if with_id:
        kept = [k for k in range(len(lines)) if k not in rejected]
        assert t.column("id").to_pylist() == [json.loads(lines[k])["id"] for k in kept]
        rows = kept
    else:
        rows = t.column("row").to_pylist()
        assert sorted(rows + rejected) == list(range(len(lines)))
    texts = [json.loads(lines[k])["text"] for k in rows]
    assert_close(embeddings(t), tiny_encoder().encode(texts) if texts else np.zeros((0, 32), np.float32))


@settings(SETTINGS, max_examples=min(SETTINGS.max_examples, 12))
@given(lines=st.lists(st.text(alphabet="abcxyz é,\"", min_size=1, max_size=12).filter(lambda t: t.strip(" ")),
                      min_size=1, max_size=12),
       chunk=st.integers(1, 4))
def test_valid_csv_always_succeeds(tmp_path_factory, capsys, lines, chunk):
    """The other side of test_random_csv_bytes (which accepts a clean failure): a well-formed CSV of ordinary texts
    (commas and quotes quoted as CSV quotes them) is never refused, and every row is written in order with the
    vector its text gets from the Encoder."""
    d = tmp_path_factory.mktemp("valid")
    src, out = d / "in.csv", d / "o.parquet"
    with open(src, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "text"])
        w.writerows([[i, t] for i, t in enumerate(lines)])
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--chunk-rows", chunk,
                     "--id-column", "id", "-q")
    assert (rc, err) == (0, "")
    t = read_table(out)
    assert t.column("id").to_pylist() == [str(i) for i in range(len(lines))]  # a CSV's ids are its text
    assert_close(embeddings(t), tiny_encoder().encode(lines))
