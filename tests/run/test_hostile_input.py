"""Input that looks like a table but is not what it seems (issue 25): duplicate CSV/TSV header names, JSONL lines that
are not objects, UTF-16 / UTF-32 text, a named pipe or device given as the input file, and an interrupted run's
partial output (or bertfeat's own outputs) inside the input folder.

Every refusal is one exact `Error: what - fix` line, exit 1, nothing written, the input unchanged.
"""

from __future__ import annotations

import codecs
import hashlib
import io
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import bertfeat
import bertfeat.run.progress
from bertfeat.errors import BertfeatError, InputError, render
from bertfeat.readers import open_input, resolve_files
from bertfeat.readers.text import split_wide_lines, wide_unicode
from bertfeat.readers.rejects import Reason, RejectCode, fix_for
from extract_util import (Interrupt, assert_close, embeddings, in_fresh_process, metadata, no_leftovers, read_table, run,
                          tiny_encoder, tiny_model, write_csv, write_jsonl)

TEXTS = ["hello there", "wörld façade", "a third line", "中文 and emoji 🙂"]


def extract(capsys, src, out, *extra):
    return run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "-q", *extra)


def snapshot(d: Path) -> dict:
    """Every file under d with its sha256 (an input left as it was, nothing added beside it)."""
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
            for p in sorted(d.rglob("*"))}


def refused(capsys, src, out, message, *extra):
    """The run fails with exactly `message`, writes nothing and leaves the folder as it was."""
    before = snapshot(out.parent)
    rc, _, err = extract(capsys, src, out, *extra)
    assert "Traceback" not in err, err
    assert (rc, err) == (1, f"Error: {message}\n")
    assert no_leftovers(out) == []
    assert snapshot(out.parent) == before


# ------------------------------------------------------------------------------------------ duplicate header names
@pytest.mark.parametrize("delimiter, ext", [(",", "csv"), ("\t", "tsv")])
def test_duplicate_header_name_is_refused(tmp_path, capsys, delimiter, ext):
    src = write_csv(tmp_path / f"d.{ext}", ["text", "id", "text"], [["a b", "1", "c d"]], delimiter=delimiter)
    refused(capsys, src, tmp_path / "o.parquet", f"{src}: the column name 'text' appears 2 times in the header line "
                                                 "(columns 1 and 3) - rename the columns so that every name is unique")


def test_a_duplicate_name_is_refused_even_when_unused(tmp_path, capsys):
    """Any duplicate, as for Parquet: the header is ambiguous whichever columns this run reads."""
    src = write_csv(tmp_path / "d.csv", ["note", "text", "note", "note"], [["x", "a b", "y", "z"]])
    refused(capsys, src, tmp_path / "o.parquet", f"{src}: the column name 'note' appears 3 times in the header line "
                                                 "(columns 1, 3 and 4) - rename the columns so that every name is unique",
            "--text-column", "text")


def test_blank_header_names_are_not_duplicates(tmp_path, capsys):
    """Trailing delimiters (a spreadsheet's export) give unnamed columns: they name nothing, so they are read as before."""
    src = tmp_path / "t.csv"
    src.write_text("text,label,,\nhello there,x,,\nwörld façade,y,,\n", encoding="utf-8")
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out)
    assert rc == 0, err
    assert_close(embeddings(read_table(out)), tiny_encoder().encode(TEXTS[:2]))


@pytest.mark.parametrize("names, flag", [([" ", "text", " "], ["--keep", " "]), (["", "text", ""], ["--text-column", ""])])
def test_a_blank_name_two_columns_bear_is_refused_when_chosen(tmp_path, capsys, names, flag):
    """',text,' with --text-column '': the first blank-named column was read (its cells encoded, exit 0) although two
    bear that name; repeated names are refused, blank ones only when a run reads one."""
    src = write_csv(tmp_path / "b.csv", names, [["first blank", "the text", "second blank"]])
    which = f"--{flag[0][2:]} {flag[1]!r}"
    refused(capsys, src, tmp_path / "o.parquet", f"{src}: {which} names 2 columns of the header line (columns 1 and 3) - "
                                                 "give each of them a name in the header line, and pass the one to read",
            *flag)


def test_a_bom_in_a_column_name_is_shown(tmp_path, capsys):
    """A header line's BOM after blank lines (files joined) is part of the first name: 'columns are: \ufeffid' showed it
    raw, invisible, beside the --id-column id it did not match."""
    src = tmp_path / "b.csv"
    src.write_bytes(b"\n\n\xef\xbb\xbfid,text\n1,hello\n")
    refused(capsys, src, tmp_path / "o.parquet", f"{src}: --id-column 'id' is not a column - columns are: \\ufeffid, text",
            "--id-column", "id")


# ------------------------------------------------------------------------------------------ JSONL lines that are not objects
JSONL_FIX = 'bertfeat reads JSONL with one JSON object per line ({"text": ...}); convert the file, or use CSV'


@pytest.mark.parametrize("data, line, kind", [
    (b'["a", 1]\n["b", 2]\n', 1, "a JSON array"),
    (b'"a"\n"b"\n', 1, "a JSON string"),
    (b"1\n2.5\n", 1, "a JSON number"),
    (b"true\n", 1, "a JSON boolean"),
    (b"null\n", 1, "JSON null"),
    (b'\nnot json\n["a"]\n{"broken": \n', 3, "a JSON array"),  # the first line that is JSON, by its line number
])
def test_jsonl_of_non_objects_is_refused_at_open(tmp_path, capsys, data, line, kind):
    src = tmp_path / "a.jsonl"
    src.write_bytes(data)
    message = f"{src} line {line}: {kind}, not an object - {JSONL_FIX}"
    refused(capsys, src, tmp_path / "o.parquet", message)
    refused(capsys, src, tmp_path / "o.parquet", message, "--text-column", "text")  # the option does not help


@pytest.mark.parametrize("data, message", [
    (b"id,text\n1,hello\n2,world\n", " line 1: not JSON (Expecting value at column 1); none of its first 3 line(s) is a "
     'JSON object - bertfeat reads JSONL with one JSON object per line ({"text": ...}); if the file is CSV or TSV, pass '
     "--input-format csv (or tsv)"),
    (b"\n\ntext\thi\n", " line 3: not JSON (Expecting value at column 1); none of its first 1 line(s) is a JSON object"),
    (b"\n \n\n", ': the file is empty (blank lines only) - give one JSON object per line ({"text": ...})'),
    # lines that are JSON objects gone wrong are not told to be CSV (found by audit)
    (b'{"text": "a"},\n{"text": "b"},\n', ' line 1: not JSON (Extra data at column 14); none of its first 2 line(s) is '
     'a JSON object - bertfeat reads JSONL with one JSON object per line ({"text": ...}); write each line with a JSON '
     "writer (json.dumps: no comma after an object, no nesting deeper than Python reads)\n"),
    (b'{"text": ' + b"[" * 5000 + b"]" * 5000 + b"}\n", " line 1: not JSON (nested too deeply for Python's parser); none "
     "of its first 1 line(s) is a JSON object - bertfeat reads JSONL with one JSON object per line ({\"text\": ...}); "
     "write each line with a JSON writer"),
])
def test_jsonl_without_any_json_says_so(tmp_path, capsys, data, message):
    """CSV (or blank lines) under a .jsonl name: the first line that is not JSON and what to pass, not "cannot tell
    which column holds the text (columns: none)"."""
    src = tmp_path / "a.jsonl"
    src.write_bytes(data)
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet")
    assert rc == 1 and err.startswith(f"Error: {src}{message}"), err
    assert not (tmp_path / "o.parquet").exists()


def test_jsonl_mixing_objects_and_arrays_rejects_the_arrays(tmp_path):
    src = tmp_path / "m.jsonl"
    src.write_bytes(b'["header", "row"]\n{"text": "a", "id": 1}\n[1, 2]\n"str"\n{"text": "b", "id": 2}\n')
    r = open_input(str(src), id_column="id")
    assert r.columns == ["text", "id"]
    (b,) = list(r.batches())
    assert (b.rows, b.texts, b.ids) == ([0, 1, 2, 3, 4], [None, "a", None, None, "b"], [None, 1, None, None, 2])
    assert b.pre_rejected == {0: Reason(RejectCode.NOT_OBJECT, "a JSON array, not an object"),
                              2: Reason(RejectCode.NOT_OBJECT, "a JSON array, not an object"),
                              3: Reason(RejectCode.NOT_OBJECT, "a JSON string, not an object")}
    assert render(fix_for("not-object")) == ('make the line a JSON object such as {"text": ...} (one object per line), '
                                     "or pass on_bad_row='skip' to write it to the rejects file and go on")


# ------------------------------------------------------------------------------------------ UTF-16 and UTF-32
def test_wide_unicode_detection():
    assert wide_unicode("text\nhello\n".encode("utf-16")) == ("utf-16", "the file starts with a UTF-16 byte order mark: "
                                                                        "it is UTF-16 text")
    assert wide_unicode("text\n".encode("utf-32"))[0] == "utf-32"
    assert wide_unicode("text\nhello\n".encode("utf-16-be"))[0] == "utf-16-be"
    assert wide_unicode("text\nhello\n".encode("utf-32-le"))[0] == "utf-32-le"
    assert wide_unicode("text\n中文字符\n".encode("utf-8")) is None
    assert wide_unicode(b"text\nab\x00cd\n") is None  # a stray NUL byte (a bad row) is not UTF-16
    assert wide_unicode("tx".encode("utf-16-le")) is None  # too short to tell


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize("encoding, hint, how", [
    ("utf-16", "utf-16", "the file starts with a UTF-16 byte order mark: it is UTF-16 text"),
    ("utf-16-le", "utf-16-le", "every other byte of the file is a NUL byte: it looks like UTF-16 little-endian text"),
    ("utf-16-be", "utf-16-be", "every other byte of the file is a NUL byte: it looks like UTF-16 big-endian text"),
    ("utf-32", "utf-32", "the file starts with a UTF-32 byte order mark: it is UTF-32 text"),
])
def test_utf16_input_names_its_encoding_and_reads_with_it(tmp_path, capsys, fmt, encoding, hint, how):
    src = tmp_path / f"u.{fmt}"
    body = "text\n" + "".join(t + "\n" for t in TEXTS) if fmt == "csv" else "".join(json.dumps({"text": t}) + "\n" for t in TEXTS)
    src.write_bytes(body.encode(encoding))
    out = tmp_path / "o.parquet"
    refused(capsys, src, out, f"{src}: {how}, not utf-8 - pass --encoding {hint}")
    refused(capsys, src, out, f"{src}: {how}, not iso8859-1 - pass --encoding {hint}", "--encoding", "latin-1")
    rc, _, err = extract(capsys, src, out, "--encoding", hint)
    assert rc == 0, err
    assert_close(embeddings(read_table(out)), tiny_encoder().encode(TEXTS))
    assert metadata(out)["rows"]["written"] == len(TEXTS)


@pytest.mark.parametrize("fmt, written, given, why", [
    ("csv", "utf-16-be", "utf-16", "cannot read the header line as utf-16 (UTF-16 stream does not start with BOM)"),
    ("csv", "utf-16-le", "utf-16-be", "cannot read the header line as utf-16-be (CSV parse error: Empty CSV file or "
                                      "block: cannot infer number of columns)"),
    ("jsonl", "utf-16-le", "utf-16-be", "line 1: not JSON as utf-16-be"),
])
def test_utf16_given_without_the_files_byte_order_names_it(tmp_path, capsys, fmt, written, given, why):
    """--encoding utf-16 on a file without a byte order mark, or the other byte order: the error named no cause, and
    for JSONL offered --input-format csv; it names the byte order the file's NUL bytes show, and that reads it."""
    src = tmp_path / f"u.{fmt}"
    body = "text\n" + "".join(t + "\n" for t in TEXTS) if fmt == "csv" else "".join(json.dumps({"text": t}) + "\n" for t in TEXTS)
    src.write_bytes(body.encode(written))
    order = "big" if written.endswith("be") else "little"
    out = tmp_path / "o.parquet"
    refused(capsys, src, out, f"{src}{'' if fmt == 'jsonl' else ':'} {why}; every other byte of the file is a NUL byte: "
                              f"it looks like UTF-16 {order}-endian text - pass --encoding {written}", "--encoding", given)
    rc, _, err = extract(capsys, src, out, "--encoding", written)
    assert rc == 0, err
    assert_close(embeddings(read_table(out)), tiny_encoder().encode(TEXTS))


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl"])
@pytest.mark.parametrize("encoding", ["cp1252", "latin-1", "utf-16"])
def test_a_utf8_byte_order_mark_read_as_another_encoding_is_refused(tmp_path, capsys, fmt, encoding):
    """A UTF-8 file (its byte order mark says so) read with --encoding cp1252 encoded every accented letter as two or
    three others ("wörld" as "wÃ¶rld"), kept values too, and said nothing (its first column named "ï»¿id"); it is
    refused as UTF-16 bytes read as UTF-8 are. UTF-8 (the default, utf-8-sig) reads it."""
    src = tmp_path / f"b.{fmt}"
    sep = "\t" if fmt == "tsv" else ","
    body = (f"id{sep}text{sep}note\n" + "".join(f"{i}{sep}{t}{sep}{t}\n" for i, t in enumerate(TEXTS)) if fmt != "jsonl"
            else "".join(json.dumps({"id": i, "text": t, "note": t}, ensure_ascii=False) + "\n" for i, t in enumerate(TEXTS)))
    src.write_bytes(codecs.BOM_UTF8 + body.encode("utf-8"))
    out = tmp_path / "o.parquet"
    name = codecs.lookup(encoding).name
    refused(capsys, src, out, f"{src}: the file starts with a UTF-8 byte order mark: it is UTF-8 text, not {name} - "
                              "pass --encoding utf-8", "--encoding", encoding, "--keep", "note")
    for given in ((), ("--encoding", "utf-8-sig")):
        rc, _, err = extract(capsys, src, out, "--keep", "note", "--overwrite", *given)
        assert rc == 0, err
        assert read_table(out).column("note").to_pylist() == TEXTS
        assert_close(embeddings(read_table(out)), tiny_encoder().encode(TEXTS))


def test_utf16_on_standard_input(tmp_path, capsys, monkeypatch):
    data = ("text\n" + "".join(t + "\n" for t in TEXTS)).encode("utf-16")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    rc, _, err = extract(capsys, "-", tmp_path / "o.parquet", "--input-format", "csv")
    assert (rc, err) == (1, "Error: <stdin>: the input starts with a UTF-16 byte order mark: it is UTF-16 text, not utf-8 "
                            "- pass --encoding utf-16\n")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    rc, _, err = extract(capsys, "-", tmp_path / "o.parquet", "--input-format", "csv", "--encoding", "utf-16")
    assert rc == 0, err
    assert_close(embeddings(read_table(tmp_path / "o.parquet")), tiny_encoder().encode(TEXTS))


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_utf16_partitions_are_whole_files_and_read_back_equal(tmp_path, fmt):
    """The Dask engine cuts text on b'\\n': not in UTF-16, whose line ends are two bytes, so such a file is one partition."""
    src = tmp_path / f"u.{fmt}"
    texts = [f"{t} {i}" for i in range(40) for t in TEXTS[:2]]
    body = "text\n" + "".join(t + "\n" for t in texts) if fmt == "csv" else "".join(json.dumps({"text": t}) + "\n" for t in texts)
    src.write_bytes(body.encode("utf-16"))
    r = open_input(str(src), encoding="utf-16")
    parts = r.partitions(64, target=8)
    assert len(parts) == 1
    b = r.read_partition(parts[0], 0)
    got = [bytes(t).decode() if isinstance(t, bytes) else t for t in b.texts]
    assert (b.rows, got, b.pre_rejected) == (list(range(len(texts))), texts, {})
    assert r.count_rows(parts[0]) == len(texts)


def test_undecodable_utf16_jsonl_line_is_a_bad_row(tmp_path):
    src = tmp_path / "u.jsonl"
    bad = "\ud800".encode("utf-16-le", "surrogatepass") + '{"text": "x"}\n'.encode("utf-16-le")  # a lone surrogate
    src.write_bytes('{"text": "ok"}\n'.encode("utf-16") + bad + '\n{"text": "fine"}'.encode("utf-16-le"))
    (b,) = list(open_input(str(src), encoding="utf-16").batches())
    assert (b.rows, b.texts) == ([0, 1, 2], ["ok", None, "fine"])  # the blank line is no row, the last needs no line end
    assert b.pre_rejected == {1: Reason(RejectCode.ENCODING, "invalid utf-16 at byte 0 of the line")}


def test_utf16_lines_end_only_at_a_whole_line_feed():
    data = "a\u0a00\u0100b\nc".encode("utf-16-le")  # b"\n\x00" at byte 3 is the end of U+0A00 and the start of U+0100
    assert split_wide_lines(data, "utf-16-le", 2) == (["a\u0a00\u0100b\n".encode("utf-16-le")], "c".encode("utf-16-le"))
    data = "\u0a00\n".encode("utf-32-be")
    assert split_wide_lines(data, "utf-32-be", 4) == ([data], b"")


# ------------------------------------------------------------------------------------------ pipes, devices, sockets
def pipe_fix(path, fmt="csv"):
    return (f"to stream from a pipe pass - and feed it on standard input, e.g. cat {path} | bertfeat extract - "
            f"--input-format {fmt} -o out.parquet")


def run_with_deadline(capsys, *args, seconds=60):
    """extract in a thread; a reader that blocked on the pipe is released (and the test fails) after `seconds`."""
    result = {}
    t = threading.Thread(target=lambda: result.update(r=extract(capsys, *args)), daemon=True)
    t.start()
    t.join(seconds)
    return result.get("r"), t


@pytest.mark.parametrize("name, extra, fmt", [("p.csv", (), "csv"), ("p.parquet", (), "parquet"),
                                              ("pipe", ("--input-format", "jsonl"), "jsonl"), ("pipe", (), "csv")])
def test_a_named_pipe_is_refused_without_blocking(tmp_path, capsys, name, extra, fmt):
    fifo = tmp_path / name
    os.mkfifo(fifo)
    out = tmp_path / "o.parquet"
    result, thread = run_with_deadline(capsys, fifo, out, *extra)
    if thread.is_alive():  # it opened the pipe and waits for a writer: release it, then fail
        os.close(os.open(fifo, os.O_RDWR))
        thread.join(30)
        pytest.fail("bertfeat extract blocked on a named pipe")
    rc, _, err = result
    assert (rc, err) == (1, f"Error: {fifo}: is a named pipe (FIFO), not a file - {pipe_fix(fifo, fmt)}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_device_or_a_socket_is_refused(tmp_path, capsys):
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, "/dev/null", out, "--input-format", "csv")
    assert (rc, err) == (1, f"Error: /dev/null: is a character device, not a file - {pipe_fix('/dev/null')}\n")
    path = tmp_path / "s.csv"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        rc, _, err = extract(capsys, path, out)
    assert (rc, err) == (1, f"Error: {path}: is a socket, not a file - {pipe_fix(path)}\n")
    assert not out.exists()


# ------------------------------------------------------------------------------------------ --encoding: codecs that read no text
ENCODING_FIX = "pass the file's text encoding, e.g. --encoding utf-8 or --encoding latin-1"


@pytest.mark.parametrize("codec, name", [("rot13", "rot-13"), ("base64", "base64"), ("hex", "hex"), ("zlib", "zlib"),
                                         ("bz2", "bz2"), ("quopri", "quopri"), ("uu", "uu")])
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_an_encoding_that_is_no_text_encoding_is_refused(tmp_path, capsys, codec, name, fmt):
    """Python's bytes-to-bytes and text-to-text codecs crashed inside the reader (the bug line) or failed on the data."""
    src = tmp_path / f"in.{fmt}"
    src.write_text("text\nhello\n" if fmt == "csv" else '{"text": "hello"}\n')
    refused(capsys, src, tmp_path / "o.parquet", f"--encoding {codec} is not a text encoding: Python's {name} codec "
                                                 f"converts bytes to bytes or text to text, not bytes to text - {ENCODING_FIX}",
            "--encoding", codec)


@pytest.mark.parametrize("codec, why", [("idna", "Unsupported error handling surrogateescape"),
                                        ("punycode", "Unsupported error handling surrogateescape"),
                                        ("undefined", "undefined encoding")])
def test_an_encoding_that_cannot_decode_a_stream_is_refused(tmp_path, capsys, codec, why):
    src = write_csv(tmp_path / "in.csv", ["text"], [["hello"]])
    refused(capsys, src, tmp_path / "o.parquet", f"--encoding {codec} cannot read a file: Python's {codec} codec does not "
                                                 f"decode a stream of bytes ({why}) - {ENCODING_FIX}", "--encoding", codec)
    with pytest.raises(InputError) as e:  # Python names the parameter
        bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), encoding=codec)
    assert e.value.message.startswith(f"encoding='{codec}' cannot read a file")


# ------------------------------------------------------------------------------------------ standard input closed or unreadable
STDIN_FIX = ("pipe the input into bertfeat (e.g. cat in.csv | bertfeat extract - --input-format csv -o out.parquet), or "
             "pass the file's path instead of -")


def extract_stdin(tmp_path, fmt: str, **popen) -> subprocess.CompletedProcess:
    return subprocess.run(["bertfeat", "extract", "-", "--input-format", fmt, "-o", str(tmp_path / "o.parquet"),
                           "--model", str(tiny_model()), "-q"], capture_output=True, text=True, timeout=120, **popen)


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl", "parquet"])
def test_closed_standard_input_is_one_line(tmp_path, fmt):
    """`bertfeat extract - <&-`: Python starts with sys.stdin None, and every reader said "unexpected AttributeError"."""
    p = extract_stdin(tmp_path, fmt, preexec_fn=lambda: os.close(0))
    assert (p.returncode, p.stderr) == (1, f"Error: <stdin>: standard input is closed, so there is nothing to read - {STDIN_FIX}\n")
    assert sorted(q.name for q in tmp_path.iterdir()) == []


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl", "parquet"])
def test_unreadable_or_empty_standard_input_is_one_line(tmp_path, fmt):
    with open(tmp_path / "w", "wb") as write_only:  # standard input open for writing only
        p = extract_stdin(tmp_path, fmt, stdin=write_only)
    assert (p.returncode, p.stderr) == (1, f"Error: <stdin>: standard input cannot be read (Bad file descriptor) - {STDIN_FIX}\n")
    p = extract_stdin(tmp_path, fmt, stdin=subprocess.DEVNULL)
    what = {"csv": "CSV whose first line names the columns", "tsv": "TSV whose first line names the columns",
            "jsonl": 'one JSON object per line ({"text": ...})', "parquet": "a Parquet file"}[fmt]
    # no byte at all: said as stdin's (`false | bertfeat extract -` said "the file is empty" for CSV and JSONL)
    assert (p.returncode, p.stderr) == (1, "Error: <stdin>: standard input is empty (nothing was piped in, or the "
                                           "command writing to it failed) - check the command before the | (in bash, "
                                           "set -o pipefail makes its failure the pipeline's), and pipe "
                                           f"{what} into bertfeat extract -\n")
    assert sorted(q.name for q in tmp_path.iterdir()) == ["w"]


@pytest.mark.parametrize("fmt,encoding,data", [
    ("csv", "utf-8", "text\nthe first row\nthe irwi"),
    ("jsonl", "utf-8", '{"text": "the first row"}\n{"text": "the second"}'),
    ("csv", "utf-16", "text\nthe first row\nthe irwi"),
])
def test_standard_input_without_a_last_line_break_is_said(tmp_path, fmt, encoding, data):
    """`head -c 700 corpus.csv | bertfeat extract -` encoded the cut last row ('the irwi') as a text, exit 0, silent
    (found by audit). A file cannot be told from it, but standard input cut by its producer is the likely case: a
    warning says so; the rows are written as before, and a whole stream says nothing."""
    warning = ("Warning: <stdin>: standard input did not end with a line break, so its last row may have been cut short "
               "by the command writing it (head -c, a producer that stopped) - check that command finished (in bash, "
               "set -o pipefail makes its failure the pipeline's); a file without a last line break reads the same\n")
    for text, said in ((data, warning), (data + "\n", "")):
        p = subprocess.run(["bertfeat", "extract", "-", "--input-format", fmt, "--encoding", encoding, "-o",
                            str(tmp_path / "o.parquet"), "--model", str(tiny_model()), "-q", "--overwrite"],
                           input=text.encode(encoding), capture_output=True, timeout=120)
        assert (p.returncode, p.stderr.decode()) == (0, said)
        assert pq.read_table(tmp_path / "o.parquet").num_rows == 2


# ------------------------------------------------------------------------------------------ outputs inside the input folder
def parquet_with(path: Path, table: pa.Table, key: bytes | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table if key is None else table.replace_schema_metadata({key: b"{}"}), path)
    return path


def input_folder(d: Path, n: int = 12) -> Path:
    parquet_with(d / "a.parquet", pa.table({"text": [f"sentence number {i} of a" for i in range(n)]}))
    parquet_with(d / "sub" / "b.parquet", pa.table({"text": [f"sentence number {i} of b" for i in range(n)]}))
    return d


def leave_debris(d: Path) -> None:
    """What an interrupted run and finished runs leave in the folder: OUTPUT.partial/ with a part and its manifest
    (local engine), a Dask partial with its _full/ stage, temporaries, a finished output, a hidden folder."""
    features = pa.table({"row": [0], "embedding": [[0.5, 0.25]]})
    parquet_with(d / "o.parquet.partial" / "part-000000.parquet", features, b"bertfeat_part")
    (d / "o.parquet.partial" / "manifest.json").write_text("{}")
    parquet_with(d / "sub" / "dask.parquet.partial" / "_full" / "part-0.parquet", features, b"bertfeat")
    parquet_with(d / "sub" / "dask.parquet.partial" / "part-0.parquet", features, b"bertfeat")
    parquet_with(d / ".o.parquet.tmp-4242", features)
    parquet_with(d / ".x.parquet", pa.table({"text": ["hidden"]}))
    parquet_with(d / ".cache" / "c.parquet", pa.table({"text": ["hidden"]}))
    parquet_with(d / "done.features.parquet", features, b"bertfeat")  # a finished output, named like input
    parquet_with(d / "dask-out" / "part-0.parquet", features, b"bertfeat")  # a finished Dask output directory


@pytest.mark.parametrize("pattern", ["", "/**/*.parquet", "/**/*", "/*.parquet"])
def test_the_listing_leaves_out_partial_runs_temporaries_and_outputs(tmp_path, pattern):
    d = input_folder(tmp_path / "in")
    leave_debris(d)
    want = [str(d / "a.parquet"), str(d / "sub" / "b.parquet")]
    assert resolve_files(str(d) + pattern, "parquet")[1] == (want[:1] if pattern == "/*.parquet" else want)


def test_a_file_named_by_itself_is_read_whatever_its_name(tmp_path):
    d = tmp_path / "in"
    parquet_with(d / ".hidden.parquet", pa.table({"text": ["x"]}))
    parquet_with(d / "x.partial" / "p.parquet", pa.table({"text": ["y"]}))
    assert resolve_files(str(d / ".hidden.parquet"), "parquet")[1] == [str(d / ".hidden.parquet")]
    assert resolve_files(str(d / "x.partial" / "p.parquet"), "parquet")[1] == [str(d / "x.partial" / "p.parquet")]
    assert resolve_files(str(d / "x.partial"), "parquet")[1] == [str(d / "x.partial" / "p.parquet")]  # listed itself


def test_a_folder_of_nothing_but_outputs_says_what_was_left_out(tmp_path, capsys):
    d = tmp_path / "in"
    leave_debris(d)
    (d / "sub").mkdir(exist_ok=True)
    out = tmp_path / "o.parquet"
    refused(capsys, d, out, f"{d}: the directory holds no input .parquet or .pq file (7 left out: names starting with . or _, "
                            "OUTPUT.partial/ folders and bertfeat's own outputs are not input) - "
                            "point at a Parquet file, a directory of them, or a glob")
    refused(capsys, f"{d}/*.parquet", out, f"{d}/*.parquet: the pattern matches no input file (1 left out: names starting "
                                           "with ., OUTPUT.partial/ folders and bertfeat's own outputs are not input) - "
                                           "check the glob pattern (quote it so the shell does not expand it)")


def test_an_interrupted_run_inside_the_input_folder_is_not_read_back(tmp_path, capsys, monkeypatch):
    """extract IN/ -o IN/o.parquet, interrupted: its partial folder (parts + manifest) is not input, so the same
    command with --resume finishes with the output of an uninterrupted run; the finished output in IN/ is not
    input to the next run either."""
    d = input_folder(tmp_path / "in")
    inputs = snapshot(d)
    args = ["--chunk-rows", "4", "--threads", "1"]
    ref = tmp_path / "ref.parquet"
    rc, _, err = extract(capsys, d, ref, *args)
    assert rc == 0, err

    out = d / "o.parquet"
    monkeypatch.setattr(bertfeat.run.progress, "make_progress", lambda *a, **k: Interrupt(2))
    rc, _, err = extract(capsys, d, out, *args)
    monkeypatch.undo()
    partial = d / "o.parquet.partial"
    assert (rc, err.splitlines()[-1]) == (130, f"Interrupted: 2 chunk(s) are kept in {partial}; run the same command "
                                               "with --resume to continue"), err
    assert (partial / "manifest.json").is_file() and len(list(partial.glob("part-*.parquet"))) == 2
    assert resolve_files(str(d), "parquet")[1] == [str(d / "a.parquet"), str(d / "sub" / "b.parquet")]

    rc, _, err = extract(capsys, d, out, *args)
    assert (rc, err.splitlines()[-1].split(" - ")[0]) == (1, f"Error: a resumable partial run exists in {partial}"), err
    rc, _, err = extract(capsys, d, out, *args, "--resume")
    assert rc == 0, err
    assert read_table(out).equals(read_table(ref))
    assert metadata(out)["rows"]["written"] == 24

    again = d / "again.parquet"  # o.parquet (a bertfeat output) is in the folder now: not an input
    rc, _, err = extract(capsys, d, again, *args)
    assert rc == 0, err
    assert read_table(again).equals(read_table(ref))
    assert {k: v for k, v in snapshot(d).items() if k in inputs} == inputs
    assert sorted(set(snapshot(d)) - set(inputs)) == ["again.parquet", "o.parquet"]


# ------------------------------------------------------------------------------------------ a reader review's findings
def _kept_rows(out: Path) -> list:
    return read_table(out).column("row").to_pylist()


def _rejects(out: Path) -> list[list[str]]:
    import csv as _csv

    with open(f"{out}.rejects.csv", newline="", encoding="utf-8") as fh:
        return list(_csv.reader(fh))[1:]


def test_parquet_string_column_with_invalid_utf8_is_a_bad_row(tmp_path, capsys):
    """A Parquet writer that does not check its strings: the cell is a bad row (text, id or kept value), not an
    'unexpected UnicodeDecodeError ... this is a bug' that stops the run."""
    def unchecked(values):
        b = pa.array(values, pa.binary())
        return pa.Array.from_buffers(pa.string(), len(values), b.buffers())

    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": unchecked([b"a", b"b", b"\xffc", b"d"]), "text": unchecked([b"ok", b"\xffbad", b"x", b"y"]),
                             "lab": unchecked([b"1", b"2", b"3", b"\xfe"])}), src)
    out = tmp_path / "o.parquet"
    assert extract(capsys, src, out, "--id-column", "id", "--keep", "lab", "--on-bad-row", "skip")[0] == 0
    assert read_table(out).column("id").to_pylist() == ["a"]
    why = "(a Parquet string column its writer did not check)"
    assert _rejects(out) == [["1", "b", f"invalid UTF-8 at byte 0 of the text {why}", "2"],
                             ["2", "\\xffc", f"invalid UTF-8 at byte 0 of the id {why}", "3"],
                             ["3", "d", f"invalid UTF-8 at byte 0 of the kept column 'lab' {why}", "\\xfe"]]


def test_ids_that_are_not_utf8(tmp_path, capsys):
    """A CSV id that is not UTF-8 is a bad row (replacing its bytes could make two ids one); a binary Parquet id is
    written as its bytes."""
    src = tmp_path / "in.csv"
    src.write_bytes(b"id,text\n\xff1,a\n2,ok\n")
    out = tmp_path / "o.parquet"
    assert extract(capsys, src, out, "--id-column", "id", "--on-bad-row", "skip")[0] == 0
    assert read_table(out).column("id").to_pylist() == ["2"]
    assert _rejects(out) == [["0", "\\xff1", "invalid UTF-8 at byte 0 of the id"]]
    src = tmp_path / "bin.parquet"
    pq.write_table(pa.table({"bid": pa.array([b"\xff1", b"ok"], pa.binary()), "text": ["a", "b"]}), src)
    out = tmp_path / "b.parquet"
    assert extract(capsys, src, out, "--id-column", "bid")[0] == 0
    assert read_table(out).column("bid").to_pylist() == [b"\xff1", b"ok"]


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_a_csv_row_longer_than_the_parse_block(tmp_path, capsys, monkeypatch, engine):
    """A row longer than pyarrow's CSV block ("straddling object straddles two block boundaries") is read with
    larger blocks, every row once and in order; from standard input it is refused, saying why."""
    from bertfeat.readers import CsvReader

    monkeypatch.setattr(CsvReader, "CSV_BLOCK_BYTES", 1 << 12)  # 4 KiB blocks: a 20 KB row straddles
    rows = [[str(i), f"short row {i}"] for i in range(300)]
    rows[150] = ["150", "long " * 4000]
    if engine == "local":  # a quoted value with line breaks: not on Dask's byte ranges (docs/dask.md)
        rows[151] = ["151", '"quoted\nlong" ' * 1500]
    src = write_csv(tmp_path / "in.csv", ["id", "text"], rows)
    out = tmp_path / "o.parquet"
    extra = ["--engine", "dask", "--workers", "1", "--blocksize", "64KiB"] if engine == "dask" else []
    if engine == "dask":
        pytest.importorskip("distributed")
    rc, _, err = extract(capsys, src, out, "--id-column", "id", "--max-length", "16", *extra)
    assert rc == 0, err
    t = read_table(out) if engine == "local" else pa.concat_tables(
        [pq.read_table(p) for p in sorted(out.glob("part-*.parquet"))])
    assert t.column("id").to_pylist() == [str(i) for i in range(300)]
    assert t.column("n_tokens").to_pylist()[150] > 4000
    if engine == "local":
        from bertfeat.readers import open_input as _open

        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(src.read_bytes())))
        reader = _open("-", "csv", None, None, "id", "utf-8")
        with pytest.raises(InputError) as e:
            list(reader.batches())
        assert e.value.message == ("<stdin> near row 150: a row is longer than 4 KiB, more than bertfeat reads at once "
                                   "from standard input - split or shorten the row, or read the file by its path")


def test_utf16_csv_unclosed_quote_is_caught_as_in_utf8(tmp_path, capsys):
    data = 'id,text\n1,a\n2,"oops\n3,c\n4,d\n'
    for enc in ("utf-8", "utf-16"):
        src = tmp_path / f"{enc}.csv"
        src.write_bytes(data.encode(enc))
        out = tmp_path / f"{enc}.parquet"
        assert extract(capsys, src, out, "--encoding", enc, "--on-bad-row", "skip")[0] == 0
        assert _kept_rows(out) == [0]
        assert _rejects(out)[0][2].startswith("unclosed quote: the quoted field in column 'text' that opens on line 3")


def test_jsonl_too_deep_and_repeated_keys_are_bad_rows(tmp_path, capsys):
    lines = ['{"text":"a"}'] * 1001 + ['{"text":"b","x":' + "[" * 3000 + "]" * 3000 + "}", '{"text":"c"}',
                                      '{"text":"first","text":"second"}', '{"text":"ok","x":1,"x":2}']
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "o.parquet"
    assert extract(capsys, src, out, "--on-bad-row", "skip")[0] == 0
    assert _kept_rows(out) == list(range(1001)) + [1002, 1004]  # an unused key twice is not our business
    assert _rejects(out) == [["1001", "", "JSON nested too deeply for Python's parser"],
                             ["1003", "", "the key 'text' appears 2 times in the object"]]
    src.write_text('{"text":"b","x":' + "[" * 3000 + "]" * 3000 + '}\n{"text":"c"}\n')  # in the head too
    assert extract(capsys, src, tmp_path / "h.parquet", "--on-bad-row", "skip")[0] == 0
    assert _kept_rows(tmp_path / "h.parquet") == [1]


def test_jsonl_first_line_longer_than_the_head(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"text": "x " * 700_000, "id": 1}) + "\n" + '{"text":"short","id":2}\n')
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, "--id-column", "id", "--max-length", "16")
    assert rc == 0, err
    assert read_table(out).column("id").to_pylist() == [1, 2]


@pytest.mark.parametrize("data", [b"id,text", b"\xef\xbb\xbftext", "id,text".encode("utf-16"), b"id,text\r"])
def test_a_header_without_a_line_end_is_an_empty_input(tmp_path, capsys, data):
    src = tmp_path / "in.csv"
    src.write_bytes(data)
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, *(["--encoding", "utf-16"] if data.startswith(b"\xff\xfe") else []))
    assert rc == 0, err
    assert read_table(out).num_rows == 0


def test_a_csv_that_starts_with_a_blank_line_on_dask(tmp_path, capsys):
    pytest.importorskip("distributed")
    src = tmp_path / "in.csv"
    src.write_text("\n" + "id,text\n" + "".join(f"{i},sentence number {i} here\n" for i in range(400)))
    out = tmp_path / "o"
    rc, _, err = extract(capsys, src, out, "--engine", "dask", "--workers", "1", "--blocksize", "8KiB",
                         "--id-column", "id")
    assert rc == 0, err
    t = pa.concat_tables([pq.read_table(p) for p in sorted(out.glob("part-*.parquet"))])
    assert len(list(out.glob("part-*.parquet"))) > 1 and t.column("id").to_pylist() == [str(i) for i in range(400)]


def test_utf16_kept_integer_column_stays_integer_past_the_head(tmp_path):
    src = tmp_path / "in.csv"
    src.write_bytes(("id,text,n\n" + "".join(f"{i},sentence {i},{i}\n" for i in range(60000))).encode("utf-16"))
    assert len(src.read_bytes()) > 2 * (1 << 20)
    reader = open_input(str(src), None, None, None, None, "utf-16", keep=("n",))
    assert reader.keep_types() == {"n": pa.int64()}


def test_the_longest_block_is_pyarrows_limit(tmp_path, monkeypatch):
    """Blocks grow 8x up to the largest pyarrow takes (int32), then the row is refused in words, not an OverflowError."""
    from bertfeat.readers import CsvReader

    monkeypatch.setattr(CsvReader, "CSV_BLOCK_BYTES", 1 << 12)
    monkeypatch.setattr(CsvReader, "MAX_BLOCK_BYTES", (1 << 13) - 1)
    src = write_csv(tmp_path / "in.csv", ["text"], [["short"], ["long " * 4000], ["end"]])
    reader = open_input(str(src), None, None, None, None, "utf-8")
    with pytest.raises(InputError) as e:
        list(reader.batches())
    assert e.value.message.startswith(f"{src} near row 1: a row is longer than 7 KiB, more than bertfeat reads at once")
    monkeypatch.undo()
    assert CsvReader.MAX_BLOCK_BYTES == (1 << 31) - 1  # pyarrow's ReadOptions(block_size=1 << 31) is an OverflowError


def test_unchecked_utf8_in_chunked_and_dictionary_columns():
    """A Dask partition's Table holds chunked columns (a dictionary one too): the cells that are not UTF-8 are found
    in them as in a plain array (before: 'unexpected AttributeError')."""
    from bertfeat.readers.parquet import _pylist

    b = pa.array([b"ok", b"\xffbad", b"fine"], pa.binary())
    s = pa.Array.from_buffers(pa.string(), 3, b.buffers())
    d = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, 1, 0]), s)
    for col in (s, pa.chunked_array([s, s]), d, pa.chunked_array([d])):
        values, bad = _pylist(col)
        assert [values[i] for i in bad] == [b"\xffbad"] * len(bad) and len(bad) == (2 if len(values) in (5, 6) else 1)
        assert all(isinstance(v, str) for k, v in enumerate(values) if k not in bad)


def test_jsonl_ids_whose_kind_the_head_does_not_decide_are_written(tmp_path, capsys, monkeypatch):
    """The first 1,000 lines hold no usable id (null): the file's first id (an integer, further on) decides, from a
    file or from standard input. The local engine failed: `Error: column 'id' cannot be stored as string: Expected
    bytes, got a 'int' object - pass string values for 'id'`."""
    lines = [json.dumps({"id": None, "text": "x"})] * 1001
    lines += [json.dumps({"id": k if k < 5 else f"s{k}", "text": f"sentence {k}"}) for k in range(8)]
    src = tmp_path / "ids.jsonl"
    src.write_text("\n".join(lines) + "\n")
    want = [[str(r), "", "null id"] for r in range(1001)]
    want += [[str(1001 + k), f"s{k}", f'id "s{k}" is a string, but the ids before it are integers; --id-column id:str reads every id as the line wrote it'] for k in (5, 6, 7)]
    for name, args in (("file", (src,)), ("stdin", ("-", "--input-format", "jsonl"))):
        if name == "stdin":
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(src.read_bytes())))
        out = tmp_path / f"{name}.parquet"
        rc, _, err = extract(capsys, args[0], out, *args[1:], "--id-column", "id", "--on-bad-row", "skip")
        assert rc == 0, err
        t = read_table(out)
        assert t.schema.field("id").type == pa.int64(), name
        assert t.column("id").to_pylist() == [0, 1, 2, 3, 4], name
        assert _rejects(out) == want, name


# ------------------------------------------------------------------------------------------ one rule for a text (issue 44)
# Characters the BERT tokenizer drops (clean_text: control and format characters): sentence-transformers encodes
# "a\x01b" as "ab", so bertfeat does, on the command line as in Python (it used to refuse such a row in extract only).
DROPPED = ["a\x01b", "hello\x00world", "\ufeffbyte order mark", "zero\u200bwidth", "form\x0cfeed", "next\x85line",
           "del\x7fete", "sep\x1f\x1erators"]
SURROGATE_FIX = ("encode the text from valid Unicode (a lone surrogate comes from a broken \\ud800-\\udfff escape or "
                 "from decoding with errors='surrogateescape')")


def _jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"id": f"r{i}", "text": t}) + "\n" for i, t in enumerate(texts)), encoding="utf-8")
    return path


@pytest.mark.live
def test_characters_the_tokenizer_drops_are_encoded_as_sentence_transformers_encodes_them(tmp_path, capsys, minilm_dir):
    """Encoder.encode, TextFeatures and extract give every such text sentence-transformers' vector (that of the text
    without the characters), and the tokens command shows the words they join."""
    from sentence_transformers import SentenceTransformer

    from bertfeat.inspection import tokenize_text
    from bertfeat.sklearn import TextFeatures
    from extract_util import minilm

    st = SentenceTransformer(str(minilm_dir), device="cpu")
    ref = st.encode(DROPPED, convert_to_numpy=True)
    assert_close(ref[:1], st.encode(["ab"], convert_to_numpy=True))  # what the tokenizer does with them
    X = minilm().encode(DROPPED)
    assert_close(X, ref, 1e-5)
    assert_close(TextFeatures().fit_transform(DROPPED), X)
    src, out = _jsonl(tmp_path / "in.jsonl", DROPPED), tmp_path / "o.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--id-column", "id", "-q")
    assert (rc, err) == (0, "")
    assert read_table(out).column("id").to_pylist() == [f"r{i}" for i in range(len(DROPPED))]
    assert_close(embeddings(read_table(out)), X)
    assert not Path(f"{out}.rejects.csv").exists()
    assert tokenize_text("a\x01b", model=minilm_dir)["tokens"] == ["[CLS]", "ab", "[SEP]"]
    assert tokenize_text("hello\x00world", model=minilm_dir)["tokens"] == ["[CLS]", "hello", "##world", "[SEP]"]


def test_a_lone_surrogate_is_the_text_refused_everywhere(tmp_path, capsys):
    """The one text refused (textcheck.text_reason), in the same words: extract (a bad row), Encoder.encode (its
    index, a pair too), TextFeatures (X's index; it reached the tokenizer's TypeError) and the inspection functions."""
    from bertfeat import BertfeatError
    from bertfeat.inspection import tokenize_text
    from bertfeat.sklearn import TextFeatures

    text = "a\ud800b"
    src = _jsonl(tmp_path / "in.jsonl", ["fine", text])
    refused(capsys, src, tmp_path / "o.parquet", f"{src} row 1: unpaired surrogate U+D800 at character 1 of the text: not "
                                                 "valid Unicode (a JSON \\ud800 escape without its pair) - fix the JSON "
                                                 "escape (a \\ud800-\\udbff escape needs its \\udc00-\\udfff pair right "
                                                 "after it, as in \\ud83d\\ude00), or pass --on-bad-row skip to write it "
                                                 "to the rejects file and go on")
    python = ("unpaired surrogate U+D800 at character 1 of the texts[1]: not valid Unicode (a JSON \\ud800 escape "
              f"without its pair) - {SURROGATE_FIX}")
    for call, label in ((lambda: tiny_encoder().encode(["fine", text]), "texts[1]"),
                        (lambda: tiny_encoder().encode(["fine", "also"], pairs=["ok", text]), "pairs[1]"),
                        (lambda: TextFeatures(tiny_model()).fit_transform(["fine", text]), "X[1]")):
        with pytest.raises(BertfeatError) as e:
            call()
        assert e.value.message == python.replace("texts[1]", label)
    with pytest.raises(BertfeatError) as e:
        tokenize_text(text, model=tiny_model())
    assert e.value.message.startswith("text is not valid Unicode (lone surrogate U+D800 at character 1)")


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_one_text_rule_on_both_engines(tmp_path, capsys, engine, request):
    """Rows with characters the tokenizer drops are written (as Encoder.encode encodes them), missing values (an
    empty or blank cell) and a lone surrogate rejected, alike on both engines."""
    texts = ["a\x01b", "", "fine", "\x00", "zero\u200bwidth", " ", "a\ud800"]
    src, out = _jsonl(tmp_path / "in.jsonl", texts), tmp_path / "o.parquet"
    extra = []
    if engine == "dask":
        client = request.getfixturevalue("dask_client")
        extra = ["--engine", "dask", "--scheduler", client.scheduler.address]
    rc, _, err = extract(capsys, src, out, "--id-column", "id", "--on-bad-row", "skip", *extra)
    assert (rc, err) == (0, "")
    t = read_table(out)
    assert t.column("id").to_pylist() == ["r0", "r2", "r3", "r4"]
    assert_close(embeddings(t), tiny_encoder().encode(["a\x01b", "fine", "\x00", "zero\u200bwidth"]))
    assert _rejects(out) == [["1", "r1", "empty text"], ["5", "r5", "whitespace-only text"],
                             ["6", "r6", "unpaired surrogate U+D800 at character 1 of the text: not valid Unicode (a "
                                         "JSON \\ud800 escape without its pair)"]]


# ------------------------------------------------------------------------------------------ one huge field (issue 44)
# A 50 MB quoted CSV field peaked at 11.6 GB: the reader held it, pyarrow read it with 256 MiB blocks, the tokenizer
# took ~200 bytes per character of it. A value over --max-field-bytes is now a bad row, skipped as it is read.
BIG = 100_000  # bytes of the huge value in these tests, against --max-field-bytes 64KiB
CAP = ["--max-field-bytes", "64KiB"]


def _huge(n: int = BIG) -> str:
    return ('a "quoted" word,\nand a new line ' * (n // 32 + 1))[:n]


def huge_input(d: Path, fmt: str, column: str = "text", n: int = BIG) -> Path:
    """Rows a, big, c: the value of ``column`` in row big is n bytes; columns id, text, note."""
    rows = [{"id": "a", "text": TEXTS[0], "note": "x"}, {"id": "big", "text": TEXTS[1], "note": "y"},
            {"id": "c", "text": TEXTS[2], "note": "z"}]
    rows[1][column] = _huge(n) if fmt != "tsv" else _huge(n).replace("\n", " ")
    path = d / f"in.{fmt.split('-')[0]}"
    if fmt == "csv":
        write_csv(path, ["id", "text", "note"], [list(r.values()) for r in rows])
    elif fmt == "tsv":  # no quoting: the values as they are
        path.write_text("".join("\t".join(r) + "\n" for r in [["id", "text", "note"], *(list(r.values()) for r in rows)]))
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        t = pa.table({k: [r[k] for r in rows] for k in rows[0]})
        if fmt == "parquet-dictionary":
            t = t.set_column(1, "text", t.column("text").dictionary_encode())
        elif fmt == "parquet-binary":
            t = t.set_column(1, "text", t.column("text").cast(pa.large_binary()))
        pq.write_table(t, path)
    return path


FORMATS = ["csv", "tsv", "jsonl", "parquet", "parquet-dictionary", "parquet-binary"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_text_over_max_field_bytes_is_one_bad_row(tmp_path, capsys, fmt):
    src = huge_input(tmp_path, fmt)
    size = len(_huge().encode())  # the value's bytes in every format (CSV: its quotes not counted)
    why = f"the text is {size:,} bytes, more than --max-field-bytes 64KiB allows"
    out = tmp_path / "o.parquet"
    refused(capsys, src, out, f"{src} row 1: {why} - {render(fix_for(RejectCode.FIELD_TOO_LARGE), {})}",
            "--id-column", "id", *CAP)
    rc, _, err = extract(capsys, src, out, "--id-column", "id", "--on-bad-row", "skip", *CAP)
    assert rc == 0, err
    assert _rejects(out) == [["1", "big", why]]
    t = read_table(out)
    assert t.column("id").to_pylist() == ["a", "c"]
    assert_close(embeddings(t), tiny_encoder().encode([TEXTS[0], TEXTS[2]]))
    rc, _, err = extract(capsys, src, tmp_path / "all.parquet", "--id-column", "id", "--max-field-bytes", "1MiB")
    assert rc == 0, err  # under a larger limit the row is read and encoded
    assert_close(embeddings(read_table(tmp_path / "all.parquet"))[1:2],
                 tiny_encoder().encode([_huge() if fmt != "tsv" else _huge().replace("\n", " ")]))


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_an_id_or_kept_value_over_max_field_bytes_is_a_bad_row_an_unused_one_is_not(tmp_path, capsys, fmt):
    d = tmp_path / "note"
    d.mkdir()
    src = huge_input(d, fmt, "note")
    size = BIG
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, "--id-column", "id", "--keep", "note", "--on-bad-row", "skip", *CAP)
    assert rc == 0, err
    assert _rejects(out) == [["1", "big", f"the kept column 'note' is {size:,} bytes, more than --max-field-bytes 64KiB "
                                          "allows", ""]]
    rc, _, err = extract(capsys, src, tmp_path / "u.parquet", "--id-column", "id", *CAP)  # note not read: no bad row
    assert rc == 0, err
    assert read_table(tmp_path / "u.parquet").column("id").to_pylist() == ["a", "big", "c"]
    d = tmp_path / "id"
    d.mkdir()
    src = huge_input(d, fmt, "id")
    rc, _, err = extract(capsys, src, tmp_path / "i.parquet", "--id-column", "id", "--on-bad-row", "skip", *CAP)
    assert rc == 0, err
    assert _rejects(tmp_path / "i.parquet") == [["1", "", f"the id is {size:,} bytes, more than --max-field-bytes 64KiB allows"]]


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_a_value_of_exactly_max_field_bytes_is_read_one_more_is_a_bad_row(tmp_path, capsys, fmt):
    """The limit is on the value in every format: a CSV field written with its quotes and '""' was counted as
    written, so a value of exactly 64KiB (65,536 bytes, written in 65,536 + 2 + 4,096 with its quotes) was refused in
    CSV and read in JSONL and Parquet."""
    cap = 1 << 16
    for n, bad in ((cap, False), (cap + 1, True)):
        d = tmp_path / f"{n}"
        d.mkdir()
        src = huge_input(d, fmt, "note", n=n)
        assert _huge(n).count('"') == 4096  # each doubled in CSV
        out = d / "o.parquet"
        rc, _, err = extract(capsys, src, out, "--id-column", "id", "--keep", "note", "--on-bad-row", "skip", *CAP)
        assert rc == 0, err
        t = read_table(out)
        assert t.column("id").to_pylist() == (["a", "c"] if bad else ["a", "big", "c"])
        if bad:
            assert _rejects(out) == [["1", "big", f"the kept column 'note' is {n:,} bytes, more than --max-field-bytes "
                                                  "64KiB allows", ""]]
        else:
            assert t.column("note").to_pylist()[1] == _huge(n)
            assert not Path(f"{out}.rejects.csv").exists()


def test_a_nested_or_cast_parquet_value_over_max_field_bytes_is_a_bad_row(tmp_path, capsys):
    """--max-field-bytes was not applied to Parquet kept columns of lists, structs or maps (a 6 MB list kept, exit
    0), nor to a column given a type (--keep notes:str). Each value's size is its leaves' bytes (a fixed-width leaf its
    width); a value over the limit is a bad row, the values under it are kept exactly, in every row group."""
    big = 70_000  # > 64KiB
    rows = [("a", ["x"], {"n": 1, "s": "x"}, [("k", "v")], ["p", "q"], "note a"),
            ("b", ["y" * 1000] * 70, {"n": 2, "s": "y"}, None, ["p", "q"], "note b"),
            ("c", ["z"], {"n": 3, "s": "z" * big}, [("k", "v")], ["p", "q"], "note c"),
            ("d", None, None, [("k", "v" * big)], ["p", "q"], "note d"),
            ("e", ["w"], {"n": 5, "s": "w"}, [], ["q" * (big // 2)] * 2, "note e"),
            ("f", ["u"], {"n": 6, "s": "u"}, [("k", "u")], ["r", "s"], "n" * big),
            ("g", [], {"n": 7, "s": ""}, [("k", "")], ["t", "u"], "")]
    cols = list(zip(*rows))
    table = pa.table({"text": list(cols[0]), "lst": pa.array(cols[1]), "st": pa.array(cols[2]),
                      "m": pa.array(cols[3], pa.map_(pa.string(), pa.string())),
                      "fx": pa.array(cols[4], pa.list_(pa.string(), 2)), "note": list(cols[5])})
    src, out = tmp_path / "n.parquet", tmp_path / "o.parquet"
    pq.write_table(table, src, row_group_size=3)
    keep = ["--keep", "lst,st,m,fx,note:str"]
    why = "the kept column {!r} is {:,} bytes, more than --max-field-bytes 64KiB allows"
    refused(capsys, src, out, f"{src} row 1: {why.format('lst', big)} - {render(fix_for(RejectCode.FIELD_TOO_LARGE), {})}",
            *keep, *CAP)
    rc, _, err = extract(capsys, src, out, "--on-bad-row", "skip", *keep, *CAP)
    assert rc == 0, err
    assert [r[:3] for r in _rejects(out)] == [["1", "", why.format("lst", big)], ["2", "", why.format("st", big + 8)],
                                              ["3", "", why.format("m", big + 1)], ["4", "", why.format("fx", big)],
                                              ["5", "", why.format("note", big)]]
    t = read_table(out)
    assert t.column("row").to_pylist() == [0, 6]
    for c in ("lst", "st", "m", "fx", "note"):
        assert t.column(c).to_pylist() == [table.column(c)[0].as_py(), table.column(c)[6].as_py()], c
    assert t.schema.field("fx").type == pa.list_(pa.string(), 2)
    rc, _, err = extract(capsys, src, tmp_path / "all.parquet", *keep)  # under the default 4MiB every row is read
    assert rc == 0, err
    assert read_table(tmp_path / "all.parquet").column("lst").to_pylist() == table.column("lst").to_pylist()


def test_a_huge_field_on_standard_input_is_a_bad_row(tmp_path, capsys, monkeypatch):
    """From standard input (which cannot be read twice) a row longer than the CSV block was refused whole; a field over
    the limit never reaches pyarrow, so its row is one bad row like any other."""
    from bertfeat.readers import CsvReader

    monkeypatch.setattr(CsvReader, "CSV_BLOCK_BYTES", 1 << 15)  # 32 KiB blocks: the 100 KB field straddles them
    src = huge_input(tmp_path, "csv")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(src.read_bytes())))
    b = list(open_input("-", "csv", "text", None, "id", max_field_bytes=1 << 14).batches())
    assert [r for x in b for r in x.rows] == [0, 1, 2]
    assert {r: v.code for x in b for r, v in x.pre_rejected.items()} == {1: RejectCode.FIELD_TOO_LARGE}


def test_a_jsonl_line_longer_than_a_row_may_hold(tmp_path, capsys, monkeypatch):
    """JSONL lines are read up to max_field_bytes per column read plus as much for the rest of the object: a longer
    line is a bad row, skipped as read; a file that starts with one takes its columns from the lines after it; standard
    input, whose head cannot be read twice, says so."""
    rows = [{"id": "a", "text": TEXTS[0]}, {"id": "big", "text": "x", "blob": _huge(2_000_000)}, {"id": "c", "text": TEXTS[2]}]
    src = tmp_path / "in.jsonl"
    for order in (rows, rows[1:] + rows[:1]):
        src.write_text("".join(json.dumps(r) + "\n" for r in order))
        out = tmp_path / "o.parquet"
        rc, _, err = extract(capsys, src, out, "--id-column", "id", "--on-bad-row", "skip", "--max-field-bytes", "16KiB",
                             "--overwrite")
        assert rc == 0, err
        n = len(json.dumps(rows[1]))
        assert _rejects(out) == [[str(order.index(rows[1])), "", f"the line is {n:,} bytes, more than a row may hold (for "
                                                                 "each column read --max-field-bytes 16KiB, and as much "
                                                                 "for the rest of the object)"]]
        assert read_table(out).column("id").to_pylist() == [r["id"] for r in order if r["id"] != "big"]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(src.read_bytes())))  # the long line first
    with pytest.raises(InputError, match=r"<stdin> line 1: more than 1,048,576 bytes, more than bertfeat reads to find "
                                         r"the columns - put a shorter line first"):
        open_input("-", "jsonl", "text", None, "id", max_field_bytes=1 << 14)


_READ = """
import sys
from bertfeat.readers import open_input
def read(p):
    for b in open_input(p, None, "text", None, "id").batches():
        pass
read(sys.argv[1])
before = peak()
read(sys.argv[2])
print(peak() - before)
"""


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_reading_a_huge_field_keeps_memory_bounded(tmp_path, fmt):
    """A 30 MB field, read with the default limit (4 MiB): the reader's peak grew by 149 MiB (CSV: pyarrow read it
    with 32 MiB blocks, then it became bytes) and 94 MiB (JSONL: the line, its text, the object); now by what one
    read holds (17 and 24 MiB)."""
    (tmp_path / "s").mkdir()
    small, big = huge_input(tmp_path / "s", fmt, n=10), huge_input(tmp_path, fmt, n=30_000_000)
    grown = int(in_fresh_process(_READ, small, big)[0])
    assert grown < 40, f"reading a 30 MB {fmt} field grew the peak by {grown} MiB"


def test_max_field_bytes_is_checked_and_kept_for_a_resume(tmp_path, capsys):
    from bertfeat.run.manifest import manifest_differences
    from bertfeat.checks import parse_max_field_bytes

    assert [parse_max_field_bytes(v) for v in ("4MiB", "512KiB", "8MB", " 1000 ", 65536, "1GiB")] == [
        4 << 20, 512 << 10, 8_000_000, 1000, 65536, 1 << 30]
    src = huge_input(tmp_path, "csv", n=10)
    for value, what in (("1x", "'1x' is not a size"), ("0", "0 is out of range"), ("2GiB", "2GiB is out of range")):
        refused(capsys, src, tmp_path / "o.parquet", f"--max-field-bytes {what} - give bytes, e.g. 4MiB (the default), "
                "512KiB or 16MiB, up to 1GiB", "--max-field-bytes", value)
    assert manifest_differences({"max_field_bytes": 65536}, {}) == ["max field bytes: 65536 -> 4194304"]


# --------------------------------------------------------------------------- the session's own audit: huge headers
@pytest.mark.parametrize("header", [b"text" + b",x" * 10_000_000, b"text" + b",x" * 100_000, b"text" + b"y" * 12_000_000],
                         ids=["10M-columns-no-line-end", "100k-columns", "12MB-name"])
def test_a_huge_csv_header_is_refused_in_bounded_memory(tmp_path, capsys, header):
    """A 20 MB header line without a line end (10 million columns) grew past 4 GB; 100,000 columns ran for minutes; a
    12 MB first line is longer than a row may be. Each is one line, before pyarrow parses it."""
    import resource

    src = tmp_path / "in.csv"
    src.write_bytes(header + (b"\nhello" + b",1" * (header.count(b",")) if header.count(b",") < 200_000 else b""))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model())
    assert rc == 1 and err.startswith(f"Error: {src}: ") and err.count("\n") == 1, err
    assert ("columns, more than 10,000, which bertfeat does not read as a table" in err
            or "its first line runs past the" in err), err
    assert err.endswith(" - check it is a CSV / TSV file with a header line, or keep the columns you need (with cut, "
                        "or as Parquet, whose columns are read apart)\n")
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024  # MiB (ru_maxrss in KiB)
    assert grown < 400, f"the peak grew by {grown:.0f} MiB"
    assert not (tmp_path / "o.parquet").exists()


def test_more_of_the_sessions_audit(tmp_path, capsys):
    """Found by the session's own audit: a header naming one column 3,000 times printed a 17,000-character line;
    -o file:out.parquet (no slashes) gave the bug line; report --probe at a named pipe said 'not found'."""
    src = tmp_path / "in.csv"
    src.write_text("text," + ",".join(["x"] * 3000) + "\nhello," + ",".join(["1"] * 3000) + "\n")
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model())
    assert rc == 1 and err == (f"Error: {src}: the column name 'x' appears 3000 times in the header line (columns 2, 3, "
                               "4, 5, 6, ... and 3001) - rename the columns so that every name is unique\n")
    good = write_csv(tmp_path / "g.csv", ["text"], [["hello"]])
    rc, _, err = run(capsys, "extract", good, "-o", "file:out.parquet", "--model", tiny_model())
    assert rc == 1 and err.startswith("Error: the output file:out.parquet is a file:// URL, not a path - "), err
    assert not list(tmp_path.glob("file*")) and not Path("file:out.parquet").exists()
    fifo = tmp_path / "f.parquet"
    os.mkfifo(fifo)
    from bertfeat.features import read_feature_metadata  # what report --probe reads first

    with pytest.raises(BertfeatError) as e:
        read_feature_metadata(fifo)
    assert e.value.message == (f"{fifo} is a named pipe (FIFO), not a feature file - write the features to a regular "
                               "file (`bertfeat extract ... -o FILE`) and pass that")


def test_a_jsonl_whose_only_line_is_too_long_is_not_called_empty(tmp_path, capsys):
    """Found by the session's own audit (5.19): a 14 MB object of a million keys on one line was 'the file is empty
    (blank lines only)'."""
    src = tmp_path / "big.jsonl"
    src.write_text(json.dumps({"text": "hello", **{f"k{i}": i for i in range(1_000_000)}}) + "\n")
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model())
    assert (rc, err) == (1, f"Error: {src}: its first 1 line(s) are each longer than a row may be (8,388,608 bytes, "
                            "twice --max-field-bytes), so no column can be read from them - raise --max-field-bytes, "
                            "or check it is JSONL with one object per line\n")


def test_wide_inputs_list_their_columns_in_one_short_line(tmp_path, capsys):
    """The session's own audit (7.42, 7.44, 5.47): a 3,000-column CSV or a 100,000-character name made a 38,000- /
    100,000-character error line; a 60,000-column Parquet took minutes (a quadratic duplicate check)."""
    import time

    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "in.csv"
    src.write_text("text," + ",".join(f"column_{i}" for i in range(3000)) + "," + "n" * 100_000 + "\nhello"
                   + ",1" * 3001 + "\n")
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--text-column", "nope")
    assert rc == 1 and err.count("\n") == 1 and len(err) < 1000, len(err)
    assert err.endswith(f"columns are: text, {', '.join(f'column_{i}' for i in range(29))}, ... (2,972 more)\n"), err
    wide = tmp_path / "w.parquet"
    pq.write_table(pa.table({"text": ["hello"], **{f"c{i}": [i] for i in range(60_000)}}), wide)
    t0 = time.perf_counter()
    rc, _, err = run(capsys, "extract", wide, "-o", tmp_path / "w.out.parquet", "--model", tiny_model(), "-q")
    assert rc == 0, err
    print(f"60,000-column Parquet: {time.perf_counter() - t0:.1f} s")


@pytest.mark.parametrize("pattern", ["in/*.parquet", "in"])
def test_a_named_pipe_matched_by_a_glob_or_in_a_folder_is_refused(tmp_path, capsys, pattern):
    """The session's own audit (5.35): a FIFO matched by a glob was skipped without a word (the run read the other
    files, exit 0), where a FIFO named alone is refused."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path / "in"
    d.mkdir()
    pq.write_table(pa.table({"text": ["hello"]}), d / "a.parquet")
    os.mkfifo(d / "b.parquet")
    rc, _, err = run(capsys, "extract", tmp_path / pattern, "-o", tmp_path / "o.parquet", "--model", tiny_model())
    assert (rc, err) == (1, f"Error: {d / 'b.parquet'} (matched by {tmp_path / pattern}) is a named pipe (FIFO), not a "
                            "file - move it out of the folder, or narrow the pattern to the data files\n")


# ------------------------------------------------------------------------------------------ TSV written with CSV quoting
# TSV is read without quoting (the STS Benchmark's lines start values with a quote that never closes). A TSV written
# with quoting on (pandas' to_csv(sep="\t"), Python's csv module, R) was read with its quotes in the texts, and a
# quoted line break made two rows: silently other vectors, and row numbers shifted.
QUOTED_TSV_FIX = ("if the file's values are quoted as in CSV (pandas, Python's csv module and R write TSV so), read it "
                  "as CSV with tabs: --input-format csv --delimiter tab; if the quotes are the value's own (a Python "
                  'docstring """...""" is written so too, and TSV cannot tell them apart), write the rows as JSONL or '
                  "Parquet; or pass --on-bad-row skip to write it to the rejects file and go on")


def _quoted_tsv(path: Path, rows: list[list[str]]) -> Path:
    """A TSV as pandas / Python's csv module write it (QUOTE_MINIMAL: a value holding a quote is quoted)."""
    import csv as _csv

    with open(path, "w", newline="", encoding="utf-8") as fh:
        _csv.writer(fh, delimiter="\t", lineterminator="\n").writerows(rows)
    return path


@pytest.mark.parametrize("column, what", [("text", "the text"), ("id", "the id"), ("note", "kept column 'note'")])
def test_a_tsv_value_quoted_as_csv_is_a_bad_row(tmp_path, capsys, column, what):
    rows = [{"id": "a", "text": "plain words", "note": "x"}, {"id": "b", "text": "more words", "note": "y"},
            {"id": "c", "text": "last words", "note": "z"}]
    rows[1][column] = 'he said "hi"'
    src = _quoted_tsv(tmp_path / "in.tsv", [["id", "text", "note"], *(list(r.values()) for r in rows)])
    assert '"he said ""hi"""' in src.read_text()
    out = tmp_path / "o.parquet"
    reason = (f'{what} is quoted as CSV quotes a value ("he said ""hi""": in quotes, its own quotes doubled), but TSV '
              "is read without quoting, so the quotes would be part of it")
    refused(capsys, src, out, f"{src} row 1: {reason} - {QUOTED_TSV_FIX}", "--id-column", "id", "--keep", "note")
    rc, _, err = extract(capsys, src, out, "--id-column", "id", "--keep", "note", "--on-bad-row", "skip")
    assert (rc, err) == (0, "")
    assert read_table(out).column("id").to_pylist() == ["a", "c"]
    written = '"he said ""hi"""'  # the rejects file shows the values as the file has them
    assert _rejects(out) == [["1", written if column == "id" else "b", reason, written if column == "note" else "y"]]
    # the fix given: read as CSV with tabs, every value as it was meant
    out2 = tmp_path / "o2.parquet"
    rc, _, err = extract(capsys, src, out2, "--id-column", "id", "--keep", "note", "--input-format", "csv",
                         "--delimiter", "tab")
    assert (rc, err) == (0, "")
    t = read_table(out2)
    assert (t.column("id").to_pylist(), t.column("note").to_pylist()) == ([r["id"] for r in rows], [r["note"] for r in rows])
    assert_close(embeddings(t), tiny_encoder().encode([r["text"] for r in rows]))


def test_a_tsv_without_quoting_keeps_its_quotes(tmp_path, capsys):
    """A value that starts with a quote (closed or not, STS Benchmark's lines) is read as written: TSV has no quoting."""
    texts = ['"The grass family is one of the most widely distributed', '"Phoneme" is a theoretical construct',
             'a 5" screen', '"Stop!"', '""']
    src = tmp_path / "in.tsv"
    src.write_text("".join(f"{t}\t{k}\n" for k, t in [("text", "id"), *((t, str(k)) for k, t in enumerate(texts))]))
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, "--id-column", "id")
    assert (rc, err) == (0, "")
    t = read_table(out)
    assert t.column("id").to_pylist() == ["0", "1", "2", "3", "4"]
    assert_close(embeddings(t), tiny_encoder().encode(texts))


def test_a_tsv_header_in_quotes_is_refused(tmp_path, capsys):
    """R's write.table(sep="\\t") quotes every name and string: read without quoting, none would lose its quotes."""
    src = tmp_path / "r.tsv"
    src.write_text('"text"\t"id"\n"hello"\t"1"\n')
    refused(capsys, src, tmp_path / "o.parquet", f'{src}: the header line\'s names are in quotes ("text", "id"), as '
            "CSV quotes them, but TSV is read without quoting - read the file as CSV with tabs: --input-format csv "
            "--delimiter tab")


# ------------------------------------------------------------------------------------------ a CR alone inside a line
LONE_CR_FIX = ("remove the CR from the value or replace it with a space (e.g. perl -pe 's/\\r(?!\\n)/ /g' in.tsv > "
               "fixed.tsv, which keeps CRLF line ends), quote the value (CSV: a quoted value keeps its CR), or write the "
               "rows as JSONL or Parquet, which keep it; or pass --on-bad-row skip to write it to the rejects file and go "
               "on")


@pytest.mark.parametrize("fmt, eol", [("tsv", "\n"), ("csv", "\r\n")])
def test_a_cr_alone_in_a_value_never_passes_as_a_row(tmp_path, capsys, fmt, eol):
    """pyarrow (as pandas and Python's csv module) ends a row at a CR alone. In a file of line feeds a CR alone is part
    of a value, and a row read from a part of its line changed the user's data without a word: a one-column file
    gave two texts for one line (rc 0, a row too many), and with --on-bad-row skip a kept value was written cut short
    (note 'n3' for 'n3\\rmore') beside its id. Each part of such a line is now a bad row that names the column and
    shows the line; the other rows, their ids and kept values read back exactly as written."""
    sep = "\t" if fmt == "tsv" else ","
    shown = "\\t" if fmt == "tsv" else ","
    one = tmp_path / f"one.{fmt}"
    one.write_bytes(eol.join(["text", "hello\rworld", "second", ""]).encode())
    reason = ("part of a line that a carriage return alone (CR) in column 'text' cuts into rows (\"hello\\rworld\"): a CR "
              "ends a row as a line end does, but this file's lines end in line feeds")
    refused(capsys, one, tmp_path / "o.parquet", f"{one} row 0: {reason} - {LONE_CR_FIX}")

    src = tmp_path / f"in.{fmt}"
    rows = [["id", "text", "note"], ["007", "first words", "n1"], ["b", "more words", "n3\rmore"],
            ["c", "last words", " n4 "]]
    src.write_bytes("".join(sep.join(r) + eol for r in rows).encode())
    out = tmp_path / "k.parquet"
    rc, _, err = extract(capsys, src, out, "--id-column", "id", "--keep", "note", "--on-bad-row", "skip")
    assert (rc, err) == (0, "")
    t = read_table(out)
    assert (t.column("id").to_pylist(), t.column("note").to_pylist()) == (["007", "c"], ["n1", " n4 "])
    assert_close(embeddings(t), tiny_encoder().encode(["first words", "last words"]))
    reason = (f"part of a line that a carriage return alone (CR) in column 'note' cuts into rows (\"b{shown}more words"
              f"{shown}n3\\rmore\"): a CR ends a row as a line end does, but this file's lines end in line feeds")
    assert _rejects(out) == [["1", "b", reason, ""], ["2", "", reason, ""]]  # the id before the CR is whole


@pytest.mark.parametrize("header", ["id,text\n", "id,text\r\n"])
def test_crs_that_leave_a_line_one_row_are_read(tmp_path, capsys, header):
    """csv.writer on Windows, writing to a file opened without newline='', ends every row in \\r\\r\\n (a header
    written by f.write ends in \\n); a CR may also start a line. pyarrow reads each such line as one row (the other
    piece a blank line it skips), the CR dropped as a CRLF's: these rows were refused as lone-cr (exit 1), and are read."""
    src = tmp_path / "win.csv"
    src.write_bytes(header.encode() + b"1,hello\r\r\n\r2,world\r\n3,third\r\r\n")
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, src, out, "--id-column", "id")
    assert (rc, err) == (0, "")
    t = read_table(out)
    assert t.column("id").to_pylist() == ["1", "2", "3"]
    assert_close(embeddings(t), tiny_encoder().encode(["hello", "world", "third"]))


def test_a_tsv_cell_cannot_hold_a_line_break(tmp_path, capsys):
    """TSV has no quoting: a line feed ends a row whatever quotes the line holds, so a value a CSV writer quoted across
    lines is one row a line, each read as written (the STS Benchmark's values open quotes they never close), nothing
    merged or dropped; a line with another number of fields is a bad row numbered as the lines are counted."""
    one = tmp_path / "one.tsv"
    one.write_bytes(b'text\n"he said ""hi""\nbye"\nsecond\n')
    out = tmp_path / "o.parquet"
    rc, _, err = extract(capsys, one, out)
    assert (rc, err) == (0, "")
    t = read_table(out)
    assert t.column("row").to_pylist() == [0, 1, 2]
    assert_close(embeddings(t), tiny_encoder().encode(['"he said ""hi""', 'bye"', "second"]))
    two = tmp_path / "two.tsv"
    two.write_bytes(b'id\ttext\n1\t"hello\nworld"\n2\tsecond\n')
    refused(capsys, two, tmp_path / "t.parquet", f'{two} row 1: malformed line: expected 2 fields, found 1 ("world\\"") - '
            "fix the line (quote CSV fields that hold the delimiter; TSV has no quoting: a TSV quoted as CSV reads with "
            "--input-format csv --delimiter tab), or pass --on-bad-row skip to write it to the rejects file and go on")


def test_the_csv_quoted_check_is_the_language_and_linear():
    """delimited._csv_quoted accepts exactly the values a CSV writer quotes when they hold a quote ("...": its own
    quotes doubled, at least one pair), checked on every string of up to 10 of '"' and 'a'; and a hostile 1.5 MB value
    of a"" pairs with no closing quote is answered (the regular expression it replaced backtracked quadratically on it:
    0.7 s at 15 KB, hours at the field limit)."""
    import itertools
    import re

    from bertfeat.readers.delimited import _csv_quoted

    language = re.compile(rb'"(?:[^"]|"")*""(?:[^"]|"")*"', re.DOTALL)
    for n in range(11):
        for t in itertools.product((b'"', b"a"), repeat=n):
            v = b"".join(t)
            assert _csv_quoted(v) == bool(language.fullmatch(v)), v
    assert not _csv_quoted(b'"' + b'a""' * 500_000)
    assert _csv_quoted(b'"' + b'a""' * 500_000 + b'"')


# ------------------------------------------------------------------------------------------ a column named ""
def _unnamed_inputs(tmp_path: Path, texts: list[str], pairs: list[str]) -> list[Path]:
    """The same rows in each format, the pair texts in the column named "" (pandas writes its index so in a CSV)."""
    rows = [{"text": t, "": p, "id": str(k)} for k, (t, p) in enumerate(zip(texts, pairs))]
    src = [write_csv(tmp_path / "u.csv", ["text", "", "id"], [list(r.values()) for r in rows]),
           tmp_path / "u.jsonl", tmp_path / "u.parquet"]
    src[1].write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(pa.Table.from_pylist(rows), src[2])
    return src


def test_a_column_named_empty_is_a_column(tmp_path, capsys):
    """A column named "" given as the text or pair column is read (it was taken for no column: Parquet's text column
    crashed leaving a partial run behind, every format's pair column was left out, encoding the texts alone); as the
    id column it is refused, since the id column keeps its name in the output (it was written as row numbers)."""
    texts, pairs = TEXTS, ["a pair", "another pair", "pair three", "pair four"]
    for src in _unnamed_inputs(tmp_path, texts, pairs):
        out = tmp_path / f"{src.suffix[1:]}.parquet"
        rc, _, err = extract(capsys, src, out, "--pair-column", "")
        assert (rc, err) == (0, ""), src
        assert_close(embeddings(read_table(out)), tiny_encoder().encode(texts, pairs))
        assert metadata(out)["pair_column"] == ""
        rc, _, err = extract(capsys, src, out, "--text-column", "", "--overwrite")
        assert (rc, err) == (0, ""), src
        assert_close(embeddings(read_table(out)), tiny_encoder().encode(pairs))
        out.unlink()
        refused(capsys, src, out, f"{src}: --id-column '' names the column that has no name, and the id column keeps "
                "its name in the output - name that column in the input (pandas writes its index without a name: "
                "df.to_csv(index_label='id')), or leave --id-column out to number the rows", "--id-column", "")
    with pytest.raises(InputError, match="id_column='' names the column that has no name"):
        bertfeat.extract(src, tmp_path / "p.parquet", id_column="", model=tiny_model())


def test_a_parquet_text_column_named_empty_is_found(tmp_path, capsys):
    """The one string column of a Parquet file, named "", is the text column (it crashed: "'NoneType' object is not
    subscriptable", a partial run left behind)."""
    src = tmp_path / "e.parquet"
    pq.write_table(pa.Table.from_arrays([pa.array(TEXTS), pa.array([1, 2, 3, 4])], names=["", "n"]), src)
    out = tmp_path / "o.parquet"
    assert extract(capsys, src, out) == (0, "", "")
    assert_close(embeddings(read_table(out)), tiny_encoder().encode(TEXTS))
    assert metadata(out)["text_column"] == ""


# ------------------------------------------------------------------------------------------ another format's bytes
def _parquet_bytes() -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"text": TEXTS}), buf)
    return buf.getvalue()


def _zip_bytes() -> bytes:
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("in.csv", "text\n" + "\n".join(TEXTS) + "\n")
    return buf.getvalue()


def _feather_bytes() -> bytes:
    import pyarrow.feather as pf

    buf = io.BytesIO()
    pf.write_feather(pa.table({"text": TEXTS}), buf)
    return buf.getvalue()


@pytest.mark.parametrize("name", ["in.csv", "in.tsv", "in.jsonl"])
def test_a_binary_format_read_as_text_is_named(tmp_path, capsys, name):
    """Parquet, a ZIP archive (an Excel workbook, a zipped CSV) or Arrow IPC where text is expected is named, with the
    way to read it: a ZIP was "header line: invalid utf-8 at byte 12 - pass --encoding ... latin-1", and with latin-1
    its bytes were encoded as texts (exit 0); Parquet was a malformed line to quote, or "not JSON"."""
    fmt = name.rsplit(".", 1)[1].upper()
    for data, what, fix in [
            (_parquet_bytes(), "is Parquet", "pass --input-format parquet"),
            (_zip_bytes(), "is a ZIP archive (an Excel .xlsx workbook is one)",
             f"unzip it and pass the file inside (unzip -p FILE | bertfeat extract - --input-format {fmt.lower()} ... "
             "reads it without a copy); save an Excel sheet as CSV first"),
            (_feather_bytes(), "is Arrow IPC (Feather)",
             "convert it to Parquet (pyarrow.parquet.write_table(pyarrow.feather.read_table(FILE), NAME)) and pass that")]:
        src = tmp_path / name
        src.write_bytes(data)
        for extra in ([], ["--encoding", "latin-1"]):
            refused(capsys, src, tmp_path / "o.parquet", f"{src}: the file {what}, not {fmt} text - {fix}", *extra)


def test_parquet_on_standard_input_as_csv_is_named(tmp_path):
    out = tmp_path / "o.parquet"
    p = subprocess.run([sys.executable, "-m", "bertfeat", "extract", "-", "--input-format", "csv", "-o", str(out),
                        "--model", str(tiny_model()), "-q"], input=_parquet_bytes(), capture_output=True)
    assert (p.returncode, p.stderr.decode()) == (1, "Error: <stdin>: the input is Parquet, not CSV text - pass "
                                                    "--input-format parquet\n")
    assert not out.exists()


def test_a_csv_whose_header_starts_like_a_magic_is_read(tmp_path, capsys):
    """Text that starts with a binary format's magic bytes is still text (no control bytes follow them)."""
    src = write_csv(tmp_path / "m.csv", ["PAR1", "text"], [[str(k), t] for k, t in enumerate(TEXTS)])
    out = tmp_path / "o.parquet"
    assert extract(capsys, src, out) == (0, "", "")
    assert_close(embeddings(read_table(out)), tiny_encoder().encode(TEXTS))


@pytest.mark.parametrize("name", ["in.csv", "in.tsv"])
def test_json_lines_read_as_csv_is_named(tmp_path, capsys, name):
    """A JSON Lines file read as CSV / TSV: its first object was the header and every later line of one-key objects
    one text, braces and key included, encoded (exit 0, a row short); objects of several keys were refused with a fix
    naming --text-column or --delimiter. A .json array (one document) likewise."""
    fmt = name.rsplit(".", 1)[1].upper()
    src = write_jsonl(tmp_path / name, [{"text": t} for t in TEXTS])
    refused(capsys, src, tmp_path / "o.parquet", f'{src}: its first line is a JSON object ({{"text": "hello '
            f'there"}}), so the input is JSON Lines, not {fmt} - pass --input-format jsonl (or name the file .jsonl)')
    src = write_jsonl(tmp_path / name, [{"text": t, "label": k} for k, t in enumerate(TEXTS)])
    refused(capsys, src, tmp_path / "o.parquet", f'{src}: its first line is a JSON object ({{"text": "hello '
            f'there", "label": 0}}), so the input is JSON Lines, not {fmt} - pass --input-format jsonl (or name the '
            "file .jsonl)")
    src.write_text("[" + ",\n".join(json.dumps({"text": t}) for t in TEXTS) + "]\n")
    refused(capsys, src, tmp_path / "o.parquet", f"{src}: its first line '[{{\"text\": \"hello there\"}},' opens "
            f"a JSON array, not a {fmt} header - write one object per line (e.g. jq -c '.[]' FILE > in.jsonl) and pass "
            "that file")
    src = write_jsonl(tmp_path / name, [{"text": t} for t in TEXTS])
    out = tmp_path / "o.parquet"
    assert extract(capsys, src, out, "--input-format", "jsonl") == (0, "", "")
    assert_close(embeddings(read_table(out)), tiny_encoder().encode(TEXTS))
