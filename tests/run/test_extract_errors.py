"""Bad input to `bertfeat extract`: exact messages, exit codes, nothing left behind under
--on-bad-row error; the rejects file, the counts and aligned good rows under --on-bad-row skip.

Rows are 0-based data-row numbers (header excluded), the same numbers as the output's `row` column.
"""

from __future__ import annotations

import csv
import gzip
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from extract_util import (assert_close, embeddings, metadata, no_leftovers, read_table, run, summary_line,
                          tiny_encoder, tiny_model, write_csv, write_jsonl)

SKIP_FIX = "fix the row, or pass --on-bad-row skip to write it to the rejects file and go on"
ENC_FIX = ("pass --encoding with the file's encoding (e.g. --encoding latin-1), "
           "or pass --on-bad-row skip to write it to the rejects file and go on")


def extract(capsys, src, out, *extra):
    return run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--chunk-rows", 2, *extra)


def rejects(path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def assert_failed_cleanly(rc, err, out, message):
    """Exit 1, exactly this one-line error at the end of stderr, and nothing at or beside the output path."""
    assert rc == 1
    assert err.splitlines()[-1] == message
    assert "Traceback" not in err
    assert no_leftovers(out) == []


# ------------------------------------------------------------------------------------------ files and columns
def test_missing_file(tmp_path, capsys):
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, tmp_path / "nope.csv", out)
    assert (rc, err) == (1, f"Error: {tmp_path / 'nope.csv'}: no such file - check the path\n")
    assert no_leftovers(out) == []


def test_an_input_link_to_nothing_says_what_it_is(tmp_path, capsys):
    """A symbolic link in a loop, or to a missing file, as the input was reported as "no such file", although the
    user sees the link there (the model readers said what it is)."""
    out = tmp_path / "o.parquet"
    (tmp_path / "a.csv").symlink_to(tmp_path / "b.csv")
    (tmp_path / "b.csv").symlink_to(tmp_path / "a.csv")
    (tmp_path / "gone.csv").symlink_to("moved.csv")
    rc, _, err = extract(capsys, tmp_path / "a.csv", out)
    assert (rc, err) == (1, f"Error: {tmp_path / 'a.csv'}: is a loop of symbolic links (to {tmp_path / 'b.csv'}, which "
                            "leads back to it) - point the link at the input file, or pass the file's own path\n")
    rc, _, err = extract(capsys, tmp_path / "gone.csv", out)
    assert (rc, err) == (1, f"Error: {tmp_path / 'gone.csv'}: is a broken symbolic link (to moved.csv, which does not "
                            "exist) - restore the file it points to, or pass the file's own path\n")
    assert no_leftovers(out) == []


def test_unreadable_file(tmp_path, capsys, monkeypatch):
    src = write_csv(tmp_path / "c.csv", ["text"], [["a"]])
    out = tmp_path / "o.parquet"
    if os.geteuid() != 0:  # a real permission error (root reads everything)
        src.chmod(0)
    else:
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, *a, **k: False if str(p) == str(src) else real(p, mode, *a, **k))
    rc, _, err = extract(capsys, src, out)
    assert (rc, err) == (1, f"Error: {src}: the file is not readable - check its permissions\n")
    assert no_leftovers(out) == []


def test_a_directory_given_as_csv(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    rc, _, err = extract(capsys, tmp_path / "d", tmp_path / "o.parquet", "--input-format", "csv")
    assert (rc, err) == (1, f"Error: {tmp_path / 'd'}: is a directory - pass a CSV file (a directory works for Parquet only)\n")
    rc, _, err = extract(capsys, tmp_path / "d", tmp_path / "o.parquet")
    assert (rc, err) == (1, f"Error: {tmp_path / 'd'}: the directory holds no .parquet or .pq file - "
                            "point at a Parquet file, a directory of them, or a glob\n")


def test_a_directory_of_csv_files_says_so(tmp_path, capsys):
    """A folder of CSV / JSONL files (compressed too): the error names what it holds and how to read them (before: only
    'holds no .parquet or .pq file - point at a Parquet file, ...', which says nothing a CSV user can do)."""
    d = tmp_path / "d"
    d.mkdir()
    for name in ("a.csv", "b.CSV", "c.jsonl", ".hidden.csv", "notes.txt"):
        (d / name).write_text("text\nhello\n")
    (d / "e.csv.gz").write_bytes(gzip.compress(b"text\nhello\n"))
    rc, _, err = extract(capsys, d, tmp_path / "o.parquet")
    assert (rc, err) == (1, f"Error: {d}: the directory holds no .parquet or .pq file, but 3 .csv files and 1 .jsonl "
                            "file (a directory is read as Parquet; CSV, TSV and JSONL are read one file at a time) - "
                            f"pass one file, join them into one (e.g. gunzip -k {d}/*.csv.gz, then awk 'NR == 1 || FNR > 1' "
                            f"{d}/*.csv > all.csv, which keeps one header line), or convert them to Parquet\n")
    assert not (tmp_path / "o.parquet").exists()


def test_unknown_extension(tmp_path, capsys):
    (tmp_path / "c.txt").write_text("text\na\n")
    rc, _, err = extract(capsys, tmp_path / "c.txt", tmp_path / "o.parquet")
    assert (rc, err) == (1, f"Error: {tmp_path / 'c.txt'}: cannot tell the format from the extension - "
                            "add --input-format csv|tsv|parquet|jsonl; a file of one text per line has no header line: "
                            f"give it one, e.g. (echo text; cat {tmp_path / 'c.txt'}) | bertfeat extract - --input-format "
                            "tsv ... (TSV: a comma or a quote in a text is part of it)\n")


def test_a_missing_input_of_no_known_extension_is_said_missing_first(tmp_path, capsys):
    """nope.txt (or 'in.csv ' with a trailing space) that does not exist said "add --input-format" first, and only
    after that was followed, "no such file" (found by audit)."""
    for name in ("nope.txt", "in.csv "):
        rc, _, err = extract(capsys, tmp_path / name, tmp_path / "o.parquet")
        assert (rc, err) == (1, f"Error: {tmp_path / name}: no such file - check the path\n")


def test_unknown_column_lists_the_columns(tmp_path, capsys):
    src = write_csv(tmp_path / "c.csv", ["id", "body", "label"], [["1", "a", "x"]])
    rc, _, err = extract(capsys, src, tmp_path / "o.parquet", "--text-column", "text")
    assert (rc, err) == (1, f"Error: {src}: --text-column 'text' is not a column - columns are: id, body, label\n")
    rc, _, err = extract(capsys, src, tmp_path / "o.parquet", "--text-column", "body", "--id-column", "key")
    assert (rc, err) == (1, f"Error: {src}: --id-column 'key' is not a column - columns are: id, body, label\n")
    rc, _, err = extract(capsys, src, tmp_path / "o.parquet", "--text-column", "body", "--pair-column", "hyp")
    assert (rc, err) == (1, f"Error: {src}: --pair-column 'hyp' is not a column - columns are: id, body, label\n")


def test_no_text_column_identifiable(tmp_path, capsys):
    src = write_csv(tmp_path / "c.csv", ["id", "body", "label"], [["1", "a", "x"]])
    rc, _, err = extract(capsys, src, tmp_path / "o.parquet")
    assert (rc, err) == (1, f"Error: {src}: cannot tell which column holds the text (columns: id, body, label) - "
                            "pass --text-column NAME\n")
    # JSONL: only string-valued fields count, so {"n": 1, "body": "x"} has one candidate and works
    j = write_jsonl(tmp_path / "j.jsonl", [{"n": 1, "body": "hello"}, {"n": 2, "body": "world"}])
    rc, _, err = extract(capsys, j, tmp_path / "j.parquet")
    assert rc == 0, err
    assert metadata(tmp_path / "j.parquet")["text_column"] == "body"


@pytest.mark.parametrize("data, what", [(b"", "the file is empty"), (b"\n\r\n  \n", "the file is empty (blank lines only)")])
def test_empty_file(tmp_path, capsys, data, what):
    """A file of blank lines was "the file is empty" (JSONL says "blank lines only", as here now)."""
    (tmp_path / "c.csv").write_bytes(data)
    rc, _, err = extract(capsys, tmp_path / "c.csv", tmp_path / "o.parquet")
    assert (rc, err) == (1, f"Error: {tmp_path / 'c.csv'}: {what} - the first line must name the columns\n")


def test_unknown_encoding(tmp_path, capsys):
    src = write_csv(tmp_path / "c.csv", ["text"], [["a"]])
    rc, _, err = extract(capsys, src, tmp_path / "o.parquet", "--encoding", "klingon")
    assert (rc, err) == (1, "Error: unknown encoding 'klingon' - pass a Python codec name such as utf-8, latin-1 or cp1252\n")


def test_parquet_non_string_text_column(tmp_path, capsys):
    """A whole non-string column is refused up front (every row would be bad)."""
    pq.write_table(pa.table({"n": [1, 2], "text2": ["a", "b"]}), tmp_path / "d.parquet")
    rc, _, err = extract(capsys, tmp_path / "d.parquet", tmp_path / "o.parquet", "--text-column", "n")
    assert (rc, err) == (1, f"Error: {tmp_path / 'd.parquet'}: column 'n' has type int64, not text - "
                            "choose a string column with --text-column (string columns: text2)\n")
    assert no_leftovers(tmp_path / "o.parquet") == []


# ------------------------------------------------------------------------------------------ bad rows, one by one
MALFORMED_FIX = ("fix the line (quote CSV fields that hold the delimiter; TSV has no quoting: a TSV quoted as CSV reads "
                 "with --input-format csv --delimiter tab), or pass --on-bad-row skip to write it to the rejects file "
                 "and go on")
CSV_CASES = {
    "empty": (b"id,text\na,hello\nb,\nc,fine\n", "row 1: empty text", SKIP_FIX),
    "quoted-empty": (b'id,text\na,hello\nb,""\nc,fine\n', "row 1: empty text", SKIP_FIX),
    "whitespace": (b"id,text\na,hello\nb,fine\nc, \t \n", "row 2: whitespace-only text", SKIP_FIX),
    "malformed": (b"id,text\na,hello\nb,x,y\nc,fine\n", 'row 1: malformed line: expected 2 fields, found 3 ("b,x,y")',
                  MALFORMED_FIX),
    "too-few": (b"id,text\na,hello\nb,fine\nc\n", 'row 2: malformed line: expected 2 fields, found 1 ("c")',
                MALFORMED_FIX),
    "utf8": (b"id,text\na,hello\nb,caf\xe9 au lait\nc,fine\n", "row 1: invalid UTF-8 at byte 3 of the text", ENC_FIX),
}


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_malformed_line_with_invalid_utf8_is_one_bad_row(tmp_path, capsys):
    """pyarrow cannot pass such a line to the skip handler (it decodes it first): the run stopped, even under skip.
    Now the file is read again with the line mended, so the line is one bad row naming its byte, every other row read,
    and pyarrow's failed decode never reaches stderr."""
    src = tmp_path / "c.csv"
    src.write_bytes(b"id,text\na,hello\nb,\xff,x\nc,fine\n")
    out = tmp_path / "o.parquet"
    why = "malformed line: expected 2 fields, found 3, and it is not valid utf-8 (byte 0xff)"
    rc, _, err = extract(capsys, src, out, "--on-bad-row", "error")
    assert_failed_cleanly(rc, err, out, f"Error: {src} row 1: {why} - {MALFORMED_FIX}")
    rc, _, err = extract(capsys, src, out, "--on-bad-row", "skip", "--id-column", "id")
    assert rc == 0, err
    assert rejects(tmp_path / "o.parquet.rejects.csv") == [["row", "id", "reason"], ["1", "", why]]
    t = read_table(out)
    assert t.column("id").to_pylist() == ["a", "c"]
    assert_close(embeddings(t), tiny_encoder().encode(["hello", "fine"]))
    assert summary_line(err, "rows rejected") == "rows rejected 1"


def test_malformed_line_with_invalid_utf8_on_standard_input_cannot_be_skipped(tmp_path, capsys, monkeypatch):
    """Standard input cannot be read again: the run stops naming the row, and how to read the line."""
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"id,text\na,hello\nb,\xff,x\nc,fine\n")))
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, "-", out, "--input-format", "csv", "--on-bad-row", "skip")
    assert_failed_cleanly(rc, err, out, "Error: <stdin> row 1: malformed line: expected 2 fields, found 3, and it is not "
                                        "valid utf-8, so it cannot be skipped from standard input - fix the line, pass "
                                        "--encoding with the file's encoding (e.g. --encoding latin-1), or read the file "
                                        "by its path")


@pytest.mark.parametrize("case", list(CSV_CASES))
def test_csv_bad_row_error(tmp_path, capsys, case):
    data, what, fix = CSV_CASES[case]
    src = tmp_path / "c.csv"
    src.write_bytes(data)
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, "--id-column", "id")
    assert_failed_cleanly(rc, err, out, f"Error: {src} {what} - {fix}")


def test_a_malformed_tsv_line_is_not_told_to_quote(tmp_path, capsys):
    """TSV has no quoting, so the fix 'quote fields that hold the delimiter' did not work there: a TSV written with
    CSV quoting (pandas) whose value holds a tab is read as CSV with tabs, as the fix says."""
    src = tmp_path / "c.tsv"
    src.write_bytes(b'id\ttext\na\thello\nb\t"tab\there"\nc\tfine\n')
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, "--id-column", "id")
    assert_failed_cleanly(rc, err, out, f'Error: {src} row 1: malformed line: expected 2 fields, found 3 ("b\\t\\"tab\\there\\"") '
                                        f"- {MALFORMED_FIX}")
    rc, _, err = extract(capsys, src, out, "--id-column", "id", "--input-format", "csv", "--delimiter", "tab", "-q")
    assert (rc, err) == (0, "")
    assert read_table(out).column("id").to_pylist() == ["a", "b", "c"]


def test_a_bad_row_of_a_parquet_dataset_names_its_file_and_row_there(tmp_path, capsys):
    """A folder or glob of Parquet files numbers its rows across the files (the output's and the rejects' `row`): the
    error named that number alone, so finding row 1,234,567 of a folder meant counting the files' rows."""
    d = tmp_path / "ds"
    d.mkdir()
    for k, texts in enumerate((["a", "b", "c"], ["d", "  ", "f"])):
        pq.write_table(pa.table({"text": texts}), d / f"p{k}.parquet")
    out = tmp_path / "o.parquet"
    for src in (d, d / "*.parquet"):
        rc, _, err = extract(capsys, src, out)
        assert_failed_cleanly(rc, err, out, f"Error: {src} row 4 ({d / 'p1.parquet'} row 1): whitespace-only text - "
                                            f"{SKIP_FIX}")
    rc, _, err = extract(capsys, d / "p1.parquet", out)  # one file: its own rows
    assert_failed_cleanly(rc, err, out, f"Error: {d / 'p1.parquet'} row 1: whitespace-only text - {SKIP_FIX}")


JSONL_CASES = {
    "null": (b'{"text": "ok"}\n{"text": null}\n', "row 1: null text"),
    "number": (b'{"text": "ok"}\n{"text": 42}\n', "row 1: non-string text (number 42)"),
    # NaN and the infinities are numbers the line wrote, not missing values; named as written
    "nan": (b'{"text": "ok"}\n{"text": NaN}\n', "row 1: non-string text (number NaN)"),
    "infinity": (b'{"text": "ok"}\n{"text": Infinity}\n', "row 1: non-string text (number Infinity)"),
    "-infinity": (b'{"text": "ok"}\n{"text": -Infinity}\n', "row 1: non-string text (number -Infinity)"),
    "1e400": (b'{"text": "ok"}\n{"text": 1e400}\n', "row 1: non-string text (number 1e400)"),
    "nan-pair": (b'{"text": "ok", "p": "a"}\n{"text": "b", "p": NaN}\n', "row 1: non-string pair text (number NaN)"),
    "object": (b'{"text": "ok"}\n{"text": {"a": 1}}\n', "row 1: non-string text (object {\"a\": 1})"),
    "boolean": (b'{"text": "ok"}\n{"text": true}\n', "row 1: non-string text (boolean true)"),  # not Python's True
    "array": (b'{"text": "ok"}\n{"text": ["a", null]}\n', 'row 1: non-string text (array ["a", null])'),
    "missing": (b'{"text": "ok"}\n{"body": "x"}\n', "row 1: no field 'text'"),
    "bad-json": (b'{"text": "ok"}\n{"text": "x"\n', "row 1: invalid JSON (Expecting ',' delimiter: line 1 column 13 (char 12))"),
    "not-object": (b'{"text": "ok"}\n["x"]\n', "row 1: a JSON array, not an object"),
    "a-string": (b'{"text": "ok"}\n"x"\n', "row 1: a JSON string, not an object"),
    "empty": (b'{"text": "ok"}\n\n{"text": ""}\n', "row 1: empty text"),  # blank lines are not rows
}


@pytest.mark.parametrize("case", list(JSONL_CASES))
def test_jsonl_bad_row_error(tmp_path, capsys, case):
    data, what = JSONL_CASES[case]
    src = tmp_path / "j.jsonl"
    src.write_bytes(data)
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, "--text-column", "text", *(["--pair-column", "p"] if "pair" in case else []))
    fix = "fix the line (one JSON object per line), or pass --on-bad-row skip to write it to the rejects file and go on" \
        if "invalid JSON" in what else SKIP_FIX
    if "not an object" in what:
        fix = ('make the line a JSON object such as {"text": ...} (one object per line), '
               "or pass --on-bad-row skip to write it to the rejects file and go on")
    assert_failed_cleanly(rc, err, out, f"Error: {src} {what} - {fix}")


def test_parquet_null_text_and_null_id(tmp_path, capsys):
    pq.write_table(pa.table({"id": pa.array([1, 2, None, 4]), "text": pa.array(["a", None, "c", "d"])}), tmp_path / "d.parquet")
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, tmp_path / "d.parquet", out, "--id-column", "id")
    assert_failed_cleanly(rc, err, out, f"Error: {tmp_path / 'd.parquet'} row 1: null text - {SKIP_FIX}")
    rc, _, err = extract(capsys, tmp_path / "d.parquet", out, "--id-column", "id", "--on-bad-row", "skip", "-q")
    assert rc == 0, err
    assert rejects(tmp_path / "o.parquet.rejects.csv") == [["row", "id", "reason"], ["1", "2", "null text"], ["2", "", "null id"]]
    t = read_table(out)
    assert t.column("id").to_pylist() == [1, 4]
    assert_close(embeddings(t), tiny_encoder().encode(["a", "d"]))


def test_first_bad_row_is_reported_whatever_its_kind(tmp_path, capsys):
    """Under --long-text error a too-long row 1 comes before an empty row 2 in the same chunk."""
    src = write_csv(tmp_path / "c.csv", ["text"], [["ok"], ["word " * 200], [""], ["fine"]])
    out = tmp_path / "o.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--long-text", "error")
    assert_failed_cleanly(rc, err, out, f"Error: {src} row 1: 202 tokens, more than max length 128 (--long-text error) - "
                                        "use --long-text truncate/chunk-mean/chunk-max or a larger --max-length, or --on-bad-row skip")


def test_bad_row_in_a_late_chunk_removes_the_finished_parts(tmp_path, capsys):
    rows = [[f"r{i}", f"sentence {i}"] for i in range(9)] + [["r9", " "]]
    src = write_csv(tmp_path / "c.csv", ["id", "text"], rows)
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, "--id-column", "id")  # 4 chunks are encoded and stored first
    assert_failed_cleanly(rc, err, out, f"Error: {src} row 9: whitespace-only text - {SKIP_FIX}")


def test_latin1_file_needs_and_accepts_encoding(tmp_path, capsys):
    texts = ["café crème", "naïve façade", "über straße", "plain"]
    src = tmp_path / "l.csv"
    src.write_bytes(("text\n" + "".join(t + "\n" for t in texts)).encode("latin-1"))
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out)
    assert_failed_cleanly(rc, err, out, f"Error: {src} row 0: invalid UTF-8 at byte 3 of the text - {ENC_FIX}")
    rc, _, err = extract(capsys, src, out, "--encoding", "latin-1")
    assert rc == 0, err
    assert_close(embeddings(read_table(out)), tiny_encoder().encode(texts))
    assert metadata(out)["rows"]["written"] == 4


def test_latin1_header_needs_encoding(tmp_path, capsys):
    src = tmp_path / "l.csv"
    src.write_bytes("id,tèxt\n1,a\n".encode("latin-1"))
    rc, _, err = extract(capsys, src, tmp_path / "o.parquet")
    assert (rc, err) == (1, f"Error: {src} header line: invalid utf-8 at byte 4 - "
                            "pass --encoding with the file's encoding (e.g. --encoding latin-1)\n")


# ------------------------------------------------------------------------------------------ skip: rejects + alignment
def test_csv_skip_writes_rejects_and_keeps_good_rows_aligned(tmp_path, capsys):
    data = (b"id,text\n"
            b"a,first good\n"
            b"b,\n"
            b'c,"second, good"\n'
            b"d,   \n"
            b"e,x,y\n"
            b'f,"multi\nline good"\n'
            b"g,caf\xe9\n"
            b"\n"  # a blank line is not a row
            b"h,last good\n"
            b"i,1,2,3\n")
    src = tmp_path / "c.csv"
    src.write_bytes(data)
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, "--id-column", "id", "--on-bad-row", "skip")
    assert rc == 0, err
    assert rejects(tmp_path / "o.parquet.rejects.csv") == [
        ["row", "id", "reason"],
        ["1", "b", "empty text"],
        ["3", "d", "whitespace-only text"],
        ["4", "", 'malformed line: expected 2 fields, found 3 ("e,x,y")'],
        ["6", "g", "invalid UTF-8 at byte 3 of the text"],
        ["8", "", 'malformed line: expected 2 fields, found 4 ("i,1,2,3")'],
    ]
    t = read_table(out)
    assert t.column("id").to_pylist() == ["a", "c", "f", "h"]
    good = ["first good", "second, good", "multi\nline good", "last good"]
    assert_close(embeddings(t), tiny_encoder().encode(good))
    assert metadata(out)["rows"] == {"read": 9, "written": 4, "rejected": 5, "truncated": 0, "chunked": 0, "encoded": 4, "reused": 0}
    assert summary_line(err, "rows read") == "rows read 9"
    assert summary_line(err, "rows written") == "rows written 4"
    assert summary_line(err, "rows rejected") == "rows rejected 5"
    assert summary_line(err, "rejects") == f"rejects {tmp_path / 'o.parquet.rejects.csv'}"


# ------------------------------------------------------------------------------------------ --max-bad-rows
def _every_fifth_empty(tmp_path, n=20):
    """c.csv: n rows, rows 3, 8, 13, ... empty (n // 5 bad rows)."""
    return write_csv(tmp_path / "c.csv", ["id", "text"], [[f"r{i}", "" if i % 5 == 3 else f"sentence {i}"] for i in range(n)])


def test_max_bad_rows_under_the_limit_skips_as_skip_does(tmp_path, capsys):
    src = _every_fifth_empty(tmp_path)
    rc, _, err = extract(capsys, src, tmp_path / "skip.parquet", "--id-column", "id", "--on-bad-row", "skip")
    assert rc == 0, err
    for limit in ("4", "20%"):  # 4 bad rows of 20: exactly at the limit passes
        out = tmp_path / f"o{limit[:-1] if limit.endswith('%') else limit}.parquet"
        rc, _, err = extract(capsys, src, out, "--id-column", "id", "--max-bad-rows", limit)
        assert rc == 0, err
        assert read_table(out).equals(read_table(tmp_path / "skip.parquet"))
        assert rejects(f"{out}.rejects.csv") == rejects(tmp_path / "skip.parquet.rejects.csv")
        assert [r[0] for r in rejects(f"{out}.rejects.csv")[1:]] == ["3", "8", "13", "18"]
        assert (metadata(out)["on_bad_row"], metadata(out)["max_bad_rows"]) == ("skip", limit)
        assert summary_line(err, "rows rejected") == "rows rejected 4"


def test_max_bad_rows_count_stops_at_the_chunk_that_passes_it(tmp_path, capsys):
    src = _every_fifth_empty(tmp_path)
    out = tmp_path / "o.parquet"
    out.write_bytes(b"old")  # --overwrite: the old output stays when the run fails
    rc, _, err = extract(capsys, src, out, "--id-column", "id", "--max-bad-rows", "1", "--overwrite")
    assert rc == 3
    # chunks of 2 rows: the second bad row (row 8) is in the fifth chunk, rows 0-9 read by then
    assert err.splitlines()[-1] == (
        f"Error: {src}: 2 bad rows among the 10 rows read, more than --max-bad-rows 1 allows (row 3: empty text; "
        "row 8: empty text) - raise --max-bad-rows and rerun with --resume (the 5 finished chunk(s) are kept in "
        f"{out}.partial), or fix those rows and rerun with --overwrite")
    assert out.read_bytes() == b"old"
    assert no_leftovers(out) == ["o.parquet", "o.parquet.partial"]
    # a higher limit resumes: the 5 kept chunks are not encoded again, and the output is --on-bad-row skip's
    rc, _, err = extract(capsys, src, out, "--id-column", "id", "--max-bad-rows", "4", "--resume")
    assert rc == 0, err
    assert summary_line(err, "resumed").startswith("resumed 5 chunk(s), 8 rows,")
    ref = tmp_path / "ref.parquet"
    assert extract(capsys, src, ref, "--id-column", "id", "--on-bad-row", "skip")[0] == 0
    assert read_table(out).equals(read_table(ref))
    assert rejects(f"{out}.rejects.csv") == rejects(f"{ref}.rejects.csv")


def test_max_bad_rows_share_is_exact_and_checked_once_every_row_is_read(tmp_path, capsys):
    src = _every_fifth_empty(tmp_path, 40)  # 8 bad rows of 40: 20 %
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, "--id-column", "id", "--max-bad-rows", "19.5%")
    assert rc == 3
    assert err.splitlines()[-1].startswith(
        f"Error: {src}: 8 bad rows among the 40 rows read (20 %), more than --max-bad-rows 19.5% allows (row 3: empty "
        "text; row 8: empty text; row 13: empty text; and 5 more) - raise --max-bad-rows and rerun with --resume")
    assert no_leftovers(out) == ["o.parquet.partial"]
    rc, _, err = extract(capsys, src, out, "--id-column", "id", "--max-bad-rows", "0", "--overwrite")
    assert rc == 3 and "1 bad row among the 4 rows read, more than --max-bad-rows 0 allows (row 3: empty text)" in err
    # 29 of 100 and 57 of 100 are at their limits (0.29 * 100 is 28.999999999999996 in floats)
    for bad, pct in ((29, "29%"), (57, "57%")):
        rows = [[f"r{i}", "" if i < bad else f"sentence {i}"] for i in range(100)]
        src = write_csv(tmp_path / f"p{bad}.csv", ["id", "text"], rows)
        rc, _, err = run(capsys, "extract", src, "-o", tmp_path / f"p{bad}.parquet", "--model", tiny_model(),
                         "--id-column", "id", "--max-bad-rows", pct, "-q")
        assert rc == 0, err


def test_max_bad_rows_python_api_and_option_errors(tmp_path, capsys):
    import bertfeat
    from bertfeat.errors import BertfeatError
    from bertfeat.readers.rejects import TooManyBadRows

    src = _every_fifth_empty(tmp_path)
    with pytest.raises(TooManyBadRows, match=r"4 bad rows among the 20 rows read, more than max_bad_rows=3 allows"):
        bertfeat.extract(src, tmp_path / "p.parquet", model=tiny_model(), max_bad_rows=3)
    s = bertfeat.extract(src, tmp_path / "p.parquet", model=tiny_model(), max_bad_rows="50%", on_bad_row="skip",
                         overwrite=True)
    assert (s.rows_read, s.rows_written, s.rows_rejected) == (20, 16, 4)
    for value, message in [
        ("-1", "Error: --max-bad-rows -1 is out of range - give 0 or more"),
        ("101%", "Error: --max-bad-rows 101% is out of range - give 0% to 100%"),
        ("ten", "Error: --max-bad-rows 'ten' is not a number of rows or a percentage - give a number of rows such as "
                "--max-bad-rows 100, or a share of the rows read such as --max-bad-rows 1%"),
    ]:
        rc, _, err = extract(capsys, src, tmp_path / "x.parquet", "--max-bad-rows", value)
        assert (rc, err) == (1, message + "\n")
    rc, _, err = extract(capsys, src, tmp_path / "x.parquet", "--max-bad-rows", "5", "--on-bad-row", "error")
    assert (rc, err) == (1, "Error: --max-bad-rows 5 skips bad rows up to its limit, but --on-bad-row error stops at the "
                            "first - drop --on-bad-row error (with --max-bad-rows bad rows are skipped)\n")
    with pytest.raises(BertfeatError, match=r"^max_bad_rows=True is a bool, not a whole number"):
        bertfeat.extract(src, tmp_path / "p.parquet", model=tiny_model(), max_bad_rows=True)
    assert no_leftovers(tmp_path / "x.parquet") == []


def test_csv_skip_row_numbers_without_id_column(tmp_path, capsys):
    """Default ids are the row numbers: the output's `row` and the rejects' `row` never collide and cover every row."""
    src = tmp_path / "c.csv"
    src.write_bytes(b"text\none\n\nthree\n \n\"five\"\n")
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, "--on-bad-row", "skip", "-q")
    assert rc == 0, err
    # pyarrow skips the blank line; the whitespace row is row 2
    assert rejects(tmp_path / "o.parquet.rejects.csv") == [["row", "id", "reason"], ["2", "", "whitespace-only text"]]
    t = read_table(out)
    assert t.column("row").to_pylist() == [0, 1, 3]
    assert_close(embeddings(t), tiny_encoder().encode(["one", "three", "five"]))


def test_jsonl_skip(tmp_path, capsys):
    src = tmp_path / "j.jsonl"
    src.write_bytes(b'{"id": 1, "text": "ok"}\n'
                    b'{"id": 2, "text": null}\n'
                    b'{"id": 3, "text": 42}\n'
                    b'{"id": 4, "text": "a"\n'
                    b'[1, 2]\n'
                    b'{"id": 6}\n'
                    b'\n'
                    b'{"id": "7", "text": "string id"}\n'
                    b'{"id": 8.5, "text": "float id"}\n'
                    b'{"id": 9, "text": "caf\xe9"}\n'
                    b'{"id": 10, "text": "end"}\n')
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, "--id-column", "id", "--on-bad-row", "skip")
    assert rc == 0, err
    assert rejects(tmp_path / "o.parquet.rejects.csv") == [
        ["row", "id", "reason"],
        ["1", "2", "null text"],
        ["2", "3", "non-string text (number 42)"],
        ["3", "", "invalid JSON (Expecting ',' delimiter: line 1 column 22 (char 21))"],
        ["4", "", "a JSON array, not an object"],
        ["5", "6", "no field 'text'"],
        ["6", "7", 'id "7" is a string, but the ids before it are integers; --id-column id:str reads every id as the line wrote it'],
        ["7", "8.5", "id 8.5 is a number, not a string or an integer; --id-column id:str reads every id as the line wrote it"],
        ["8", "9", "invalid utf-8 at byte 22 of the line"],
    ]
    t = read_table(out)
    assert t.column("id").to_pylist() == [1, 10]
    assert_close(embeddings(t), tiny_encoder().encode(["ok", "end"]))
    assert summary_line(err, "rows rejected") == "rows rejected 8"


def test_pair_column_bad_pairs(tmp_path, capsys):
    src = write_csv(tmp_path / "p.csv", ["a", "b"], [["x", "y"], ["x", ""], ["z", "w"]])
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, "--text-column", "a", "--pair-column", "b")
    assert_failed_cleanly(rc, err, out, f"Error: {src} row 1: empty pair text - {SKIP_FIX}")
    rc, _, err = extract(capsys, src, out, "--text-column", "a", "--pair-column", "b", "--on-bad-row", "skip", "-q")
    assert rc == 0
    t = read_table(out)
    assert t.column("row").to_pylist() == [0, 2]
    assert_close(embeddings(t), tiny_encoder().encode(["x", "z"], ["y", "w"]))


def test_all_rows_rejected_gives_an_empty_output(tmp_path, capsys):
    src = write_csv(tmp_path / "c.csv", ["text"], [[""], [" "]])
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, "--on-bad-row", "skip")
    assert rc == 0, err
    assert read_table(out).num_rows == 0
    assert len(rejects(tmp_path / "o.parquet.rejects.csv")) == 3


def test_a_clean_rerun_removes_a_stale_rejects_file(tmp_path, capsys):
    src = tmp_path / "c.csv"
    src.write_bytes(b"text\na\n\"\"\n")
    out = tmp_path / "o.parquet"
    assert extract(capsys, src, out, "--on-bad-row", "skip")[0] == 0
    assert (tmp_path / "o.parquet.rejects.csv").exists()
    src.write_bytes(b"text\na\nb\n")
    assert extract(capsys, src, out, "--on-bad-row", "skip", "--overwrite")[0] == 0  # an existing output needs --overwrite
    assert not (tmp_path / "o.parquet.rejects.csv").exists()


def test_bad_option_values(tmp_path, capsys):
    src = write_csv(tmp_path / "c.csv", ["text"], [["a"]])
    out = tmp_path / "o.parquet"
    cases = [
        (["--on-bad-row", "ignore"], "Error: unknown --on-bad-row 'ignore' - choose error or skip"),
        (["--long-text", "cut"], "Error: unknown --long-text 'cut' - choose one of truncate, chunk-mean, chunk-max, error"),
        (["--pooling", "sum"], "Error: unknown --pooling 'sum' - choose one of pooled, cls, max, mean, mean_sqrt_len_tokens, weightedmean, lasttoken, or token poolings joined with '+' such as mean+max"),
        (["--max-length", "1000"], "Error: --max-length 1000 is out of range - choose 3..128 (the model's max_position_embeddings)"),
        (["--format", "xlsx"], "Error: unknown output format 'xlsx' - choose one of parquet, npy, csv"),
        # an empty one was the extension's choice with exit 0, unsaid (found by audit)
        (["--format", ""], "Error: unknown output format '' - choose one of parquet, npy, csv"),
        (["--input-format", ""], "Error: unknown input format '' - choose one of csv, tsv, parquet, jsonl"),
        (["--pca", "abc"], "Error: --pca 'abc' is not a number - give a whole number of components (e.g. 100), "
                             "a variance fraction in (0, 1) (e.g. 0.95), mle (Minka's choice), or 1.0 / all for every component"),
        (["--chunk-rows", "0"], "Error: --chunk-rows 0 is out of range - give 1 or more"),
        (["--format", "npy", "--wide"], "Error: --wide applies to Parquet output, not npy - drop --wide, or use --format parquet"),
        (["--long-text", "chunk-mean", "--stride", "200"],
         "Error: --stride 200 is out of range for max length 128 - choose --stride from 0 to 125 (tokens shared by neighbouring windows)"),
    ]
    for extra, message in cases:
        rc, _, err = extract(capsys, src, out, *extra)
        assert (rc, err) == (1, message + "\n"), extra
        assert no_leftovers(out) == [], extra


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_first_chunk_all_rejected_keeps_the_id_type(tmp_path, capsys, fmt):
    """The id type comes from the data (or the Parquet schema), not from a first chunk that has no accepted row."""
    if fmt == "jsonl":
        src = write_jsonl(tmp_path / "d.jsonl", [{"id": 1, "text": ""}, {"id": 2, "text": " "}, {"id": 3, "text": "c"}])
        typ = pa.int64()
    else:
        src = tmp_path / "d.parquet"
        pq.write_table(pa.table({"id": pa.array([1, 2, 3], pa.int32()),
                                 "text": pa.array(["", " ", "c"]).dictionary_encode()}), src)
        typ = pa.int32()
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, "--id-column", "id", "--on-bad-row", "skip", "--text-column", "text")
    assert rc == 0, err
    t = read_table(out)
    assert t.schema.field("id").type == typ
    assert t.column("id").to_pylist() == [3]
    assert_close(embeddings(t), tiny_encoder().encode(["c"]))


@pytest.mark.parametrize("pca", [None, "2"])
@pytest.mark.parametrize("fmt", ["parquet", "npy", "csv"])
def test_a_chunk_with_every_row_rejected_in_the_middle(tmp_path, capsys, fmt, pca):
    """--on-bad-row skip with chunks of 2 rows, the second all bad: the good rows of the other chunks are written (and
    reduced, with --pca), in order, in every format (a (0, hidden) chunk once broke the PCA run and the .npy writer)."""
    import numpy as np

    src = write_csv(tmp_path / "c.csv", ["id", "text"],
                    [["a", "one"], ["b", "two"], ["c", ""], ["d", " "], ["e", "five"]])
    out = tmp_path / f"o.{fmt}"
    extra = ["--id-column", "id", "--on-bad-row", "skip"] + (["--pca", pca] if pca else [])
    rc, _, err = extract(capsys, src, out, *extra)
    assert rc == 0, err
    want = tiny_encoder().encode(["one", "two", "five"])
    if fmt == "parquet":
        t = read_table(out)
        ids, X = t.column("id").to_pylist(), embeddings(t)
    elif fmt == "npy":
        X = np.load(out)
        with open(tmp_path / "o.ids.csv", newline="", encoding="utf-8") as f:
            ids = [r[0] for r in list(csv.reader(f))[1:]]
    else:
        with open(out, newline="", encoding="utf-8") as f:
            header, *rows = list(csv.reader(f))
        ids, f0 = [r[0] for r in rows], header.index("f0")
        X = np.array([[float(v) for v in r[f0:]] for r in rows], np.float32)
    assert ids == ["a", "b", "e"]
    assert [r[:2] for r in rejects(tmp_path / f"o.{fmt}.rejects.csv")][1:] == [["2", "c"], ["3", "d"]]
    if pca:
        from bertfeat.pca.estimator import PCA

        model = PCA.load(tmp_path / "o.pca.npz")
        assert X.shape == (3, 2) and model.n_samples_ == 3
        assert_close(X, model.transform(want).astype(np.float32))
    else:
        assert_close(X, want)


def test_applied_pca_model_with_every_row_rejected(tmp_path, capsys):
    """--pca-model on an input whose rows are all bad: an empty output of the model's width, and the rejects."""
    fit_src = write_csv(tmp_path / "fit.csv", ["text"], [["alpha"], ["beta"], ["gamma"], ["delta"]])
    assert extract(capsys, fit_src, tmp_path / "fit.parquet", "--pca", "2")[0] == 0
    src = write_csv(tmp_path / "bad.csv", ["text"], [[""], [" "]])
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, "--on-bad-row", "skip", "--pca-model", tmp_path / "fit.pca.npz")
    assert rc == 0, err
    t = read_table(out)
    assert t.num_rows == 0 and t.schema.field("embedding").type.list_size == 2
    assert len(rejects(tmp_path / "o.parquet.rejects.csv")) == 3


def test_jsonl_unpaired_surrogates_and_huge_integer_ids(tmp_path, capsys):
    """A JSON escape \\ud800-\\udfff without its pair decodes to a string no UTF-8 file or tokenizer can hold: in the
    text, the pair, the id or a kept value it is a bad row (code invalid-unicode), written to the rejects file as its
    escape; an integer id outside int64 is a bad row too. Under --on-bad-row error the run stops with the row and the fix.
    (Each once ended in an "unexpected ... this is a bug" error, with a partial run left behind.)"""
    src = tmp_path / "j.jsonl"
    src.write_bytes(b'{"id": 1, "text": "ok", "p": "q", "k": "a"}\n'
                    b'{"id": 2, "text": "x\\ud800y", "p": "q", "k": "b"}\n'
                    b'{"id": 3, "text": "ok", "p": "\\udc00", "k": "c"}\n'
                    b'{"id": 4, "text": "ok", "p": "q", "k": "d\\udc00"}\n'
                    b'{"id": 123456789012345678901234, "text": "ok", "p": "q", "k": "e"}\n'
                    b'{"id": 6, "text": "paired \\ud83d\\ude00", "p": "q", "k": "f"}\n')
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, "--id-column", "id", "--pair-column", "p", "--keep", "k", "--on-bad-row", "skip")
    assert rc == 0, err
    assert rejects(tmp_path / "o.parquet.rejects.csv") == [
        ["row", "id", "reason", "k"],
        ["1", "2", "unpaired surrogate U+D800 at character 1 of the text: not valid Unicode (a JSON \\ud800 escape "
                   "without its pair)", "b"],
        ["2", "3", "unpaired surrogate U+DC00 at character 0 of the pair text: not valid Unicode (a JSON \\udc00 escape "
                   "without its pair)", "c"],
        ["3", "4", "unpaired surrogate U+DC00 at character 1 of the value of kept column 'k': not valid Unicode (a JSON "
                   "\\udc00 escape without its pair)", "d\\udc00"],
        ["4", "123456789012345678901234", "id 123456789012345678901234 is outside the int64 range of integer ids; --id-column id:str reads every id as the line wrote it", "e"],
    ]
    t = read_table(out)
    assert t.column("id").to_pylist() == [1, 6] and t.column("k").to_pylist() == ["a", "f"]
    assert_close(embeddings(t), tiny_encoder().encode(["ok", "paired \U0001F600"], ["q", "q"]))

    src.write_bytes(b'{"id": "a\\ud83d", "text": "ok"}\n')
    out = tmp_path / "e.parquet"
    rc, _, err = extract(capsys, src, out, "--id-column", "id")
    assert_failed_cleanly(rc, err, out, f"Error: {src} row 0: unpaired surrogate U+D83D at character 1 of the id: not valid "
                          "Unicode (a JSON \\ud83d escape without its pair) - fix the JSON escape (a \\ud800-\\udbff escape "
                          "needs its \\udc00-\\udfff pair right after it, as in \\ud83d\\ude00), or pass --on-bad-row skip "
                          "to write it to the rejects file and go on")


def test_parquet_dataset_whose_files_type_a_column_differently(tmp_path, capsys):
    """The id (or text, pair, kept) column must have one type in every file of a Parquet dataset: refused before any
    row is encoded, naming both files (it was an unexpected ArrowInvalid after encoding)."""
    d = tmp_path / "ds"
    d.mkdir()
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64()), "text": ["a", "b"], "k": [1, 2]}), d / "p1.parquet")
    pq.write_table(pa.table({"id": pa.array(["x", "y"]), "text": ["c", "d"], "k": [3, 4]}), d / "p2.parquet")
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, d, out, "--id-column", "id")
    assert_failed_cleanly(rc, err, out, f"Error: {d / 'p2.parquet'}: column 'id' is string, but int64 in {d / 'p1.parquet'} "
                          "- a Parquet dataset needs each column to have one type in every file: cast it when writing the "
                          "files (e.g. table.cast in pyarrow)")
    pq.write_table(pa.table({"id": pa.array([3, 4], pa.int64()), "text": ["c", "d"], "k": ["3", "4"]}), d / "p2.parquet")
    rc, _, err = extract(capsys, d, out, "--id-column", "id", "--keep", "k")
    assert_failed_cleanly(rc, err, out, f"Error: {d / 'p2.parquet'}: column 'k' is string, but int64 in {d / 'p1.parquet'} "
                          "- a Parquet dataset needs each column to have one type in every file: cast it when writing the "
                          "files (e.g. table.cast in pyarrow)")
    pq.write_table(pa.table({"id": pa.array([3, 4], pa.int64()), "text": pa.array(["c", "d"], pa.large_string()),
                             "k": [3, 4]}), d / "p2.parquet")  # string and large_string are both text: fine
    rc, _, err = extract(capsys, d, out, "--id-column", "id", "--keep", "k")
    assert rc == 0, err
    assert read_table(out).column("id").to_pylist() == [1, 2, 3, 4]


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_parquet_uint64_ids_beyond_int64(tmp_path, capsys, fmt):
    """A uint64 id column keeps its values, also those at or above 2**63 (it was an unexpected OverflowError)."""
    src = tmp_path / "u.parquet"
    big = 2**63 + 5
    pq.write_table(pa.table({"id": pa.array([1, big], pa.uint64()), "text": ["a", "b"]}), src)
    out = tmp_path / f"o.{fmt}"
    rc, _, err = extract(capsys, src, out, "--id-column", "id")
    assert rc == 0, err
    if fmt == "parquet":
        t = read_table(out)
        assert t.schema.field("id").type == pa.uint64() and t.column("id").to_pylist() == [1, big]
    else:
        with open(out, newline="", encoding="utf-8") as f:
            assert [r[0] for r in csv.reader(f)] == ["id", "1", str(big)]


def test_binary_kept_column_into_csv(tmp_path, capsys):
    """A binary Parquet column kept into a CSV is written as text: UTF-8 as it is, other bytes as \\xNN escapes (a CSV
    is text; Arrow's writer refused them and the run ended in an unexpected error after encoding)."""
    src = tmp_path / "b.parquet"
    pq.write_table(pa.table({"text": ["a", "b", "c"], "raw": pa.array([b"ok", b"\xff\xfe", None], pa.binary())}), src)
    out = tmp_path / "o.csv"
    rc, _, err = extract(capsys, src, out, "--keep", "raw")
    assert rc == 0, err
    with open(out, newline="", encoding="utf-8") as f:
        header, *rows = list(csv.reader(f))
    assert [r[header.index("raw")] for r in rows] == ["ok", "\\xff\\xfe", ""]


# 3 rows on 11 lines: a quoted value spans 8 of them, so the file may hold up to 10 rows and the fit refuses --pca 10
SPANNING = [["a"], ["b"], ["\n".join("c" * 8)]]


def test_pca_larger_than_the_rows_names_the_extract_flag(tmp_path, capsys):
    """The PCA's n_components is extract's --pca: its errors say so (they said n_components=10 on the command line).
    The fit's own refusal: the file's lines do not show that it has fewer rows than 10."""
    src = write_csv(tmp_path / "c.csv", ["text"], SPANNING)
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, "--pca", "10")
    assert_failed_cleanly(rc, err, out, "Error: --pca 10 is larger than min(n_samples, n_features) = min(3, 32) = 3 - "
                          "choose --pca <= 3, or a fraction such as 0.95 to keep 95% of the variance")


def test_pca_larger_than_the_rows_names_the_python_parameter(tmp_path):
    """bertfeat.extract(pca=10): the PCA's errors name extract's parameter pca (they said n_components=10, a
    parameter extract does not have); nothing is written."""
    import bertfeat
    from bertfeat.errors import BertfeatError

    src = write_csv(tmp_path / "c.csv", ["text"], SPANNING)
    out = tmp_path / "o.parquet"
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(src, out, model=tiny_model(), pca=10)
    assert str(e.value) == ("pca=10 is larger than min(n_samples, n_features) = min(3, 32) = 3 - choose pca <= 3, or a "
                            "fraction such as 0.95 to keep 95% of the variance")
    assert not out.exists()


def refuse_encoding(monkeypatch):
    """Any row encoded fails the test (the refusals below come before the first)."""
    from bertfeat.model.encoder import Encoder

    def prepare(*args, **kwargs):
        raise AssertionError("a row was encoded")

    monkeypatch.setattr(Encoder, "prepare", prepare)


def rows_file(tmp_path, kind: str, n: int):
    """``n`` rows of text in a file of ``kind``; "quoted-csv" quotes the values (its lines only bound its rows)."""
    texts = [f"sentence {i}" for i in range(n)]
    if kind == "parquet":
        pq.write_table(pa.table({"text": texts}), tmp_path / "r.parquet")
        return tmp_path / "r.parquet"
    if kind == "jsonl":
        return write_jsonl(tmp_path / "r.jsonl", [{"text": t} for t in texts])
    path = tmp_path / "r.csv"
    quote = '"' if kind == "quoted-csv" else ""
    path.write_text("text\n" + "".join(f"{quote}{t}{quote}\n" for t in texts), encoding="utf-8")
    return path


@pytest.mark.parametrize("kind, bound", [("csv", ""), ("jsonl", ""), ("parquet", ""), ("quoted-csv", " at most")])
def test_a_pca_of_more_components_than_rows_is_refused_before_a_row_is_encoded(tmp_path, capsys, monkeypatch, kind,
                                                                               bound):
    """--pca 5 on a 4-row file used to fail only after every row was encoded (and that work was lost). Where the rows
    are known up front (Parquet's footers; a text file read whole with the header) it is refused before the first."""
    src = rows_file(tmp_path, kind, 4)
    out = tmp_path / "o.parquet"
    refuse_encoding(monkeypatch)
    rc, _, err = extract(capsys, src, out, "--pca", "5")
    assert_failed_cleanly(rc, err, out, f"Error: --pca 5 is more components than the rows of {src} (4{bound}): a PCA has "
                          "at most one component a row - choose --pca 4 or fewer, or a variance fraction such as 0.95")
    rc, _, err = extract(capsys, src, out, "--pca", "mle")
    assert_failed_cleanly(rc, err, out, f"Error: --pca mle needs at least as many rows as the 32 features, and {src} has "
                          f"4{bound} - fit on more rows, or pass a number of components")


@pytest.mark.parametrize("rows", [0, 1])
@pytest.mark.parametrize("pca", ["8", "0.9", "all"])
def test_a_pca_of_fewer_than_two_rows_is_refused_before_a_row_is_encoded(tmp_path, capsys, monkeypatch, rows, pca):
    """--pca 8 on a header-only file advised "choose --pca 1 or fewer" (0 rows), and on one row --pca 1, which then
    failed after encoding every row ("needs at least 2 feature rows"; a helper's review): now said up front."""
    src = rows_file(tmp_path, "csv", rows)
    out = tmp_path / "o.parquet"
    refuse_encoding(monkeypatch)
    rc, _, err = extract(capsys, src, out, "--pca", pca)
    assert_failed_cleanly(rc, err, out, f"Error: --pca needs at least 2 rows, and {src} has {rows} - drop --pca or add "
                                        "rows")


def test_a_pca_of_more_components_than_rows_names_the_python_parameter(tmp_path, monkeypatch):
    import bertfeat
    from bertfeat.errors import BertfeatError

    src = rows_file(tmp_path, "parquet", 4)
    refuse_encoding(monkeypatch)
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), pca=5)
    assert str(e.value).startswith("pca=5 is more components than the rows of ")
    assert str(e.value).endswith(" - choose pca=4 or fewer, or a variance fraction such as 0.95")


def test_a_pca_of_as_many_components_as_rows_runs(tmp_path, capsys):
    """The bound refuses only what the fit would: --pca 4 on 4 rows (quoted: the lines bound them) is fitted."""
    src = rows_file(tmp_path, "quoted-csv", 4)
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, "--pca", "4")
    assert rc == 0, err
    assert embeddings(read_table(out)).shape == (4, 4)


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_a_byte_the_encoding_cannot_read_is_one_bad_row(tmp_path, capsys, fmt):
    """--encoding cp1252 (or ascii): a byte undefined there makes its row a bad row naming the byte, where it is and the
    column; the other rows are read as that encoding (it stopped the whole file, with no row, under skip too)."""
    sep = "," if fmt == "csv" else "\t"
    good = ["caf\u00e9 cr\u00e8me", "na\u00efve \u2013 fa\u00e7ade", "plain"]  # all in cp1252 (\u2013 is 0x96)
    src = tmp_path / f"w.{fmt}"
    src.write_bytes(f"id{sep}text\n".encode() + f"a{sep}{good[0]}\n".encode("cp1252") + b"b" + sep.encode() + b"bad \x81 byte\n"
                    + f"c{sep}{good[1]}\n".encode("cp1252") + b"d\x90" + sep.encode() + b"fine\n"
                    + f"e{sep}{good[2]}\n".encode("cp1252"))
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, "--id-column", "id", "--encoding", "cp1252", "--on-bad-row", "skip")
    assert rc == 0, err
    assert rejects(tmp_path / "o.parquet.rejects.csv")[1:] == [
        ["1", "b", "invalid cp1252: byte 0x81 at character 4 of the text"],
        ["3", "d\\x90", "invalid cp1252: byte 0x90 at character 1 of the id"],
    ]
    t = read_table(out)
    assert t.column("id").to_pylist() == ["a", "c", "e"]
    assert_close(embeddings(t), tiny_encoder().encode(good))
    rc, _, err = extract(capsys, src, tmp_path / "e.parquet", "--id-column", "id", "--encoding", "cp1252")
    assert_failed_cleanly(rc, err, tmp_path / "e.parquet",
                          f"Error: {src} row 1: invalid cp1252: byte 0x81 at character 4 of the text - {ENC_FIX}")
    ascii_src = tmp_path / "a.csv"
    ascii_src.write_bytes("text\nok\ncaf\u00e9\n".encode("utf-8"))
    rc, _, err = extract(capsys, ascii_src, tmp_path / "a.parquet", "--encoding", "ascii", "--on-bad-row", "skip")
    assert rc == 0, err
    assert rejects(tmp_path / "a.parquet.rejects.csv")[1:] == [["1", "", "invalid ascii: byte 0xc3 at character 3 of the text"]]


def test_a_surrogate_inside_a_reason_and_text_columns_of_two_text_types(tmp_path, capsys):
    """A kept integer column given a string with an unpaired surrogate: the reason quotes the value, and the rejects
    file still writes (escaped). A Parquet dataset whose text column is string in one file and binary in another is
    read (only id and kept columns must keep one type)."""
    src = tmp_path / "j.jsonl"
    src.write_bytes(b'{"text": "a", "k": 1}\n{"text": "b", "k": "x\\ud800"}\n{"text": "c", "k": 3}\n')
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, "--keep", "k", "--on-bad-row", "skip")
    assert rc == 0, err
    (row,) = rejects(tmp_path / "o.parquet.rejects.csv")[1:]
    assert row[0] == "1" and "\\ud800" in row[2] and row[3] == "x\\ud800"
    d = tmp_path / "ds"
    d.mkdir()
    pq.write_table(pa.table({"text": pa.array(["one", "two"])}), d / "p1.parquet")
    pq.write_table(pa.table({"text": pa.array([b"three", b"four"], pa.binary())}), d / "p2.parquet")
    rc, _, err = extract(capsys, d, tmp_path / "d.parquet")
    assert rc == 0, err
    assert_close(embeddings(read_table(tmp_path / "d.parquet")), tiny_encoder().encode(["one", "two", "three", "four"]))


STDOUT_REFUSED = ("the output '-' means standard output, which bertfeat does not write to (its outputs are files, "
                  "written atomically) - pass -o with a file name, e.g. -o features.parquet")


def test_an_empty_input_path_stride_without_windows_and_output_dash_are_refused(tmp_path, capsys, monkeypatch):
    """`extract ""` read the current directory as a Parquet dataset; --stride without --long-text chunk-* did
    nothing, silently; `-o -` wrote a file named '-'."""
    src = write_csv(tmp_path / "c.csv", ["text"], [["a"]])
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "o.parquet"
    assert run(capsys, "extract", "", "-o", out, "-m", tiny_model()) == (
        1, "", "Error: the input path is empty - pass the input file (CSV, TSV, Parquet or JSONL), a directory or glob "
               "of Parquet files, or - for standard input\n")
    assert run(capsys, "sweep", "", "-m", tiny_model())[::2] == (
        1, "Error: the input path is empty - pass the input file (CSV, TSV, Parquet or JSONL), a directory or glob "
           "of Parquet files, or - for standard input\n")
    for extra, shown in ((["--stride", "8"], "truncate"), (["--stride", "0", "--long-text", "error"], "error")):
        stride = extra[1]
        assert extract(capsys, src, out, *extra) == (
            1, "", f"Error: --stride {stride} applies to --long-text chunk-mean or chunk-max only (the windows' overlap), "
                   f"not to --long-text {shown} - add --long-text chunk-mean (or chunk-max) to cut long texts into "
                   "windows, or drop --stride\n")
    assert run(capsys, "extract", src, "-o", "-", "-m", tiny_model()) == (1, "", f"Error: {STDOUT_REFUSED}\n")
    assert run(capsys, "extract", src, "-o", ".parquet", "-m", tiny_model()) == (
        1, "", "Error: the output .parquet is an extension with no name - pass -o with a file name, e.g. "
               "-o features.parquet\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv"]
    import bertfeat

    with pytest.raises(bertfeat.BertfeatError, match=r"^stride=8 applies to long_text='chunk-mean' or chunk-max only"):
        bertfeat.extract(src, out, model=tiny_model(), stride=8)
    with pytest.raises(bertfeat.BertfeatError, match=r"^the input path is empty - "):
        bertfeat.extract("", out, model=tiny_model())
    assert extract(capsys, src, out, "--stride", "8", "--long-text", "chunk-max", "-q")[0] == 0


def test_pca_model_given_a_fitted_pca_says_to_save_it(tmp_path):
    """pca_model=<a fitted bertfeat.PCA>: the fix says how to make the file extract takes."""
    import numpy as np

    import bertfeat
    from bertfeat.errors import BertfeatError

    src = write_csv(tmp_path / "c.csv", ["text"], [["a"], ["b"], ["c"]])
    pca = bertfeat.PCA(2).fit(np.arange(40.0).reshape(10, 4) ** 2)
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), pca_model=pca)
    assert str(e.value) == ("pca_model=PCA(n_components=2) is a PCA, not a string or a path, or None - give pca_model "
                            "as a string or a path, or leave it out (a fitted PCA: PCA.save('pca.npz') first, then "
                            "pca_model='pca.npz')")
