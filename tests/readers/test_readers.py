"""bertfeat.readers (open_input and the per-format readers): formats, column choice, and streaming that keeps every row in its place.

The streaming tests use tiny pyarrow blocks (a few hundred bytes) so that a small file crosses
many block boundaries, with malformed lines before, on and after them.
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import io
import json
import lzma
import os
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bertfeat.errors import InputError, render
from bertfeat.readers.rejects import Reason, RejectCode
from bertfeat.readers import HEAD_BYTES, CsvReader, Reader, detect_format, open_input


def rows_of(src: Reader):
    """All (row, text, id, reject reason) the source yields, in order; also checks each batch's bookkeeping."""
    return rows_in(src.batches())


def rows_in(batches) -> list:
    out = []
    for b in batches:
        assert len(b.rows) == len(b.texts)
        assert b.ids is None or len(b.ids) == len(b.rows)
        assert set(b.pre_rejected) <= set(b.rows)
        for k, r in enumerate(b.rows):
            out.append((r, b.texts[k], None if b.ids is None else b.ids[k], b.pre_rejected.get(r)))
    return out


def rows_by_partitions(reader, parts) -> list:
    """The rows a pickled copy of ``reader`` (as a Dask worker gets it) reads partition by partition, in order."""
    import pickle

    worker, first, got = pickle.loads(pickle.dumps(reader)), 0, []
    for p in parts:
        assert worker.count_rows(p) == len(worker.read_partition(p, 0).rows)
        b = worker.read_partition(p, first)
        got += rows_in([b])
        first += len(b.rows)
    return got


@pytest.mark.parametrize("name, fmt", [("a.csv", "csv"), ("a.TSV", "tsv"), ("a.tab", "tsv"), ("a.parquet", "parquet"),
                                       ("a.pq", "parquet"), ("a.jsonl", "jsonl"), ("a.ndjson", "jsonl"),
                                       ("a.csv.gz", "csv"), ("a.jsonl.zst", "jsonl"), ("a.tsv.bz2", "tsv")])
def test_detect_format(name, fmt):
    assert detect_format(name, None) == fmt
    assert detect_format(name, "jsonl") == "jsonl"


@pytest.mark.parametrize("url, fmt", [("zip://in.csv::data.zip", "csv"), ("zip://a/b.jsonl.gz::s3://bucket/c.zip", "jsonl"),
                                      ("s3://bucket/features/", "parquet"), ("s3://bucket/f.tsv", "tsv"),
                                      ("zip://x.txt::data.zip", None), ("s3://bucket/notes.txt", None)])
def test_detect_format_of_a_url_is_the_file_it_reads(url, fmt):
    """A chained fsspec URL is named by the file read, not its container (zip://in.csv::data.zip was read as Parquet and
    failed with "in.csv: not a readable Parquet file"); a URL without an extension is a Parquet directory, but one
    whose extension names no format asks for the format rather than guessing Parquet."""
    if fmt:
        assert detect_format(url, None) == fmt
    else:
        with pytest.raises(InputError, match=r"cannot tell the format from the extension"):
            detect_format(url, None)


def test_a_csv_inside_a_zip_is_read_through_its_chained_url(tmp_path, monkeypatch):
    import zipfile

    monkeypatch.chdir(tmp_path)
    with zipfile.ZipFile("data.zip", "w") as z:
        z.writestr("in.csv", "id,text\n007,hello world\n008,second row\n")
    assert [(r, t, i) for r, t, i, _ in rows_of(open_input("zip://in.csv::data.zip", id_column="id"))] == [
        (0, b"hello world", b"007"), (1, b"second row", b"008")]  # the CSV reader's texts and ids: bytes


def test_detect_format_errors(tmp_path, monkeypatch):
    """A .txt is mostly one text per line without a header: the fix says how to read it so (--input-format csv alone
    took its first text for the column's name, found by audit). (A path that does not exist: "no such file" first.)"""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("a text\n")
    with pytest.raises(InputError, match=r"^a\.txt: cannot tell the format from the extension - add input_format='csv\|tsv\|parquet\|jsonl'; ") as e:
        detect_format("a.txt", None)
    assert e.value.render({}) == ("a.txt: cannot tell the format from the extension - add --input-format csv|tsv|parquet|jsonl; "
                                  "a file of one text per line has no header line: give it one, e.g. (echo text; cat a.txt) "
                                  "| bertfeat extract - --input-format tsv ... (TSV: a comma or a quote in a text is part of it)")
    with pytest.raises(InputError, match=r"^unknown input format 'xml' - choose one of csv, tsv, parquet, jsonl$"):
        detect_format("a.csv", "xml")


@pytest.mark.parametrize("header, picked", [
    (["id", "Review", "sentence"], "sentence"),  # text > sentence > content > review, any case
    (["id", "CONTENT", "review"], "CONTENT"),
    (["id", "Text", "sentence"], "Text"),
    (["body"], "body"),  # the only column
    (["text", "TEXT"], "text"),  # the name itself before another spelling (TEXT was picked: the wrong vectors)
    (["TEXT", "id", "text"], "text"),
])
def test_text_column_rules_csv(tmp_path, header, picked):
    (tmp_path / "a.csv").write_text(",".join(header) + "\n" + ",".join("x" for _ in header) + "\n")
    assert open_input(str(tmp_path / "a.csv")).text_column == picked


def test_text_column_rules_parquet_only_string_column(tmp_path):
    pq.write_table(pa.table({"id": [1], "score": [0.5], "body": ["x"], "raw": pa.array([b"x"], pa.binary())}), tmp_path / "a.parquet")
    src = open_input(str(tmp_path / "a.parquet"))
    assert (src.text_column, src.total_rows) == ("body", 1)
    # a binary column may be chosen explicitly: its values are checked as UTF-8 row by row
    assert open_input(str(tmp_path / "a.parquet"), text_column="raw").text_column == "raw"


def write_columns(tmp_path, fmt: str, columns: dict) -> str:
    """One input of ``columns`` (name -> values: strings or ints) in format ``fmt``."""
    path = tmp_path / f"a.{fmt}"
    if fmt == "parquet":
        pq.write_table(pa.table(columns), path)
    elif fmt == "jsonl":
        rows = zip(*columns.values())
        path.write_text("".join(json.dumps(dict(zip(columns, r))) + "\n" for r in rows))
    else:
        rows = [columns.keys(), *zip(*columns.values())]
        path.write_text("".join(",".join(map(str, r)) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
@pytest.mark.parametrize("ids", [["a", "b"], [1, 2]])
def test_a_text_column_named_with_spaces_around_it_is_picked_on_every_reader(tmp_path, fmt, ids):
    """A column "text " (a header written "id,text "): JSONL and Parquet picked it when the ids were integers (the
    only string column) and refused it when they were strings, CSV (every column a string) always refused it ("cannot
    tell which column holds the text"). Now every reader picks it, after every exact name and spelling in another
    case; two such columns are refused naming both and the option that picks one."""
    src = write_columns(tmp_path, fmt, {"id": ids, "text ": ["one", "two"]})
    assert open_input(src).text_column == "text "
    src = write_columns(tmp_path, fmt, {"id": ids, "text ": ["one", "two"], "sentence": ["x", "y"]})
    assert open_input(src).text_column == "sentence"  # a name written exactly still comes first
    src = write_columns(tmp_path, fmt, {"id": ids, "text ": ["one", "two"], " Text": ["x", "y"]})
    with pytest.raises(InputError) as e:
        open_input(src)
    assert e.value.render({}) == (f"{src}: the columns 'text ', ' Text' could each be the text (the spaces around a "
                                  "name are part of it) - pass --text-column NAME with the one to encode, e.g. "
                                  "--text-column 'text '")


def test_csv_streaming_across_many_blocks_keeps_rows_in_place(tmp_path, monkeypatch):
    monkeypatch.setattr(CsvReader, "CSV_BLOCK_BYTES", 300)
    malformed = {0, 1, 57, 58, 300, 731, 999}
    lines, expected = [], []
    for r in range(1000):
        if r in malformed:
            lines.append(f"id{r},bad,extra")
            expected.append((r, None, None, Reason(RejectCode.MALFORMED_LINE, f'malformed line: expected 2 fields, found 3 ("id{r},bad,extra")')))
        elif r % 97 == 5:
            lines.append(f'id{r},"multi\nline {r}, quoted"')
            expected.append((r, f"multi\nline {r}, quoted".encode(), f"id{r}".encode(), None))
        else:
            lines.append(f"id{r},text {r}")
            expected.append((r, f"text {r}".encode(), f"id{r}".encode(), None))
    (tmp_path / "a.csv").write_text("id,text\n" + "\n".join(lines) + "\n")
    src = open_input(str(tmp_path / "a.csv"), id_column="id")
    got = rows_of(src)
    assert got == expected
    assert sum(1 for _ in src.batches()) > 50  # really many blocks
    assert src.total_bytes == (tmp_path / "a.csv").stat().st_size


#: a malformed line (3 fields of 2) holding the byte 0xff, as its bad row says it
NOT_UTF8 = Reason(RejectCode.MALFORMED_LINE, "malformed line: expected 2 fields, found 3, and it is not valid utf-8 "
                                             "(byte 0xff)")


@pytest.mark.parametrize("fmt, compress, eol", [("csv", None, "\n"), ("csv", "gz", "\r\n"), ("tsv", None, "\n")])
def test_a_malformed_line_not_valid_utf8_is_a_bad_row_in_its_place(tmp_path, monkeypatch, fmt, compress, eol):
    """pyarrow decodes a malformed line before it calls the skip handler: one that is not UTF-8 stopped the whole file
    ("cannot be skipped"). Now the file is read again with that line's non-ASCII bytes read as ?, so it is a bad row
    in its place; the rows before it are handed out once, every other row as written (a valid é beside it too)."""
    monkeypatch.setattr(CsvReader, "CSV_BLOCK_BYTES", 300)
    sep = "," if fmt == "csv" else "\t"
    bad = {0, 57, 58, 300, 999}
    lines, expected = [], []
    for r in range(1000):
        if r in bad:
            lines.append(f"id{r}{sep}caf\u00e9 \udcff{sep}extra")  # \udcff: the byte 0xff (surrogateescape)
            expected.append((r, None, None, NOT_UTF8))
        elif r % 97 == 5 and fmt == "csv":
            lines.append(f'id{r},"multi{eol}line {r}, caf\u00e9"')
            expected.append((r, f"multi{eol}line {r}, caf\u00e9".encode(), f"id{r}".encode(), None))
        else:
            lines.append(f"id{r}{sep}text {r} caf\u00e9")
            expected.append((r, f"text {r} caf\u00e9".encode(), f"id{r}".encode(), None))
    data = (f"id{sep}text{eol}" + eol.join(lines) + eol).encode("utf-8", "surrogateescape")
    path = tmp_path / f"a.{fmt}{'.gz' if compress else ''}"
    path.write_bytes(gzip.compress(data) if compress else data)
    src = open_input(str(path), id_column="id")
    assert rows_of(src) == expected


def test_a_malformed_line_in_another_encoding_names_its_byte(tmp_path):
    """cp1252 has no 0x81: a malformed line holding it is a bad row naming that byte, as read (é is 0xe9 there)."""
    (tmp_path / "w.csv").write_bytes(b'id,text\na,ok\nb,"x \x81",y\nc,caf\xe9\n')
    rows = rows_of(open_input(str(tmp_path / "w.csv"), id_column="id", encoding="cp1252"))
    assert rows == [(0, b"ok", b"a", None),
                    (1, None, None, Reason(RejectCode.MALFORMED_LINE, "malformed line: expected 2 fields, found 3, and "
                                                                      "it is not valid cp1252 (byte 0x81)")),
                    (2, "caf\u00e9".encode(), b"c", None)]


def test_a_mended_line_pyarrow_counts_elsewhere_stops_the_file(tmp_path, monkeypatch):
    """The guards of a mended read: should the lines be counted apart from pyarrow's count, no row with ? for its bytes
    is handed out; the file stops (the line mended is not the one pyarrow stops at, or pyarrow reads it as a row)."""
    from bertfeat.readers.csvcheck import LineMender

    init = LineMender.__init__

    def off_by_one(self, raw, rows, *args, **kw):  # mends the line after the one asked for
        init(self, raw, {r + 1 for r in rows}, *args, **kw)
        self.rows = rows

    monkeypatch.setattr(LineMender, "__init__", off_by_one)
    (tmp_path / "c.csv").write_bytes(b"id,text\na,ok\nb,\xff,x\nc,caf\xc3\xa9\n")
    with pytest.raises(InputError) as e:
        rows_of(open_input(str(tmp_path / "c.csv")))
    assert e.value.message == (f"{tmp_path / 'c.csv'} row 1: malformed line: expected 2 fields, found 3, and it is not "
                               "valid utf-8, so it cannot be skipped - fix the line, or pass encoding with the file's "
                               "encoding (e.g. encoding='latin-1')")
    reader = open_input(str(tmp_path / "c.csv"))
    with pytest.raises(InputError) as e:
        reader._check_mended({2}, [1, 2], {1: NOT_UTF8})  # row 2 read as a row, though it was mended
    assert e.value.message == (f"{tmp_path / 'c.csv'} row 2: a malformed line not valid utf-8 was not found where it "
                               "was when the file was read again to skip it - fix the line, or pass encoding with the "
                               "file's encoding")


def test_malformed_lines_not_valid_utf8_past_the_limit_stop_the_file(tmp_path, monkeypatch):
    """Each such line costs a read of the file up to it: past MAX_MENDED_LINES the run stops, naming the encoding."""
    monkeypatch.setattr(CsvReader, "MAX_MENDED_LINES", 2)
    (tmp_path / "m.csv").write_bytes(b"id,text\n" + b"".join(b"%d,\xff,x\n" % i if i % 2 else b"%d,ok\n" % i
                                                            for i in range(10)))
    with pytest.raises(InputError) as e:
        rows_of(open_input(str(tmp_path / "m.csv")))
    assert e.value.message == (f"{tmp_path / 'm.csv'} row 5: malformed line: expected 2 fields, found 3, and it is not "
                               "valid utf-8, after 2 such lines (bertfeat reads the file again to skip each, up to 2) - "
                               "pass encoding with the file's encoding (e.g. encoding='latin-1'), or fix the lines")


@pytest.mark.parametrize("compress", [None, "gz"])
def test_csv_progress_follows_the_rows_parsed_not_the_bytes_read_ahead(tmp_path, monkeypatch, compress):
    """pyarrow reads up to 32 blocks ahead on its I/O thread: a batch's bytes_read (progress) used to be the bytes
    read so far, 100 % of a file of < 32 blocks at its first batch. Now each batch's position is where its block
    ends (stream.ReadAheadGate), within a block of the rows' own share of the file, however slow the consumer."""
    import time

    block = 64 << 10
    monkeypatch.setattr(CsvReader, "CSV_BLOCK_BYTES", block)
    n = 40_000
    text = "id,text\n" + "".join(f"{i:06d},row number {i:06d} of the file\n" for i in range(n))
    path = tmp_path / ("a.csv" + (".gz" if compress else ""))
    path.write_bytes(gzip.compress(text.encode()) if compress else text.encode())
    size = path.stat().st_size
    src = open_input(str(path))
    seen, last = 0, 0
    for b in src.batches():
        seen += len(b.rows)
        share = seen / n
        tolerance = 1.5 * block / len(text) + (0.1 if compress else 0)  # a compressed file's ratio is estimated
        assert abs(b.bytes_read / size - share) <= tolerance, (seen, b.bytes_read, size)
        assert b.bytes_start == last and b.bytes_read >= last
        last = b.bytes_read
        time.sleep(0.01)  # a busy run: pyarrow's I/O thread has time to read ahead
    assert seen == n and last == size


def test_a_row_longer_than_the_read_ahead_does_not_stall(tmp_path, monkeypatch):
    """The gate never holds pyarrow back while the parser waits for it: with no read-ahead at all, a row that needs
    the next block still parses (pyarrow itself refuses a row over more than two blocks)."""
    monkeypatch.setattr(CsvReader, "CSV_BLOCK_BYTES", 4096)
    monkeypatch.setattr(CsvReader, "READ_AHEAD_BLOCKS", 0)
    long = "x" * 7000
    (tmp_path / "a.csv").write_text(f"text\nshort\n{long}\nafter\n")
    got = [t for b in open_input(str(tmp_path / "a.csv")).batches() for t in b.texts]
    assert got == [b"short", long.encode(), b"after"]


def test_read_ahead_gate_waits_only_while_the_parser_is_busy():
    import io
    import threading

    from bertfeat.readers.stream import ReadAheadGate

    gate = ReadAheadGate(io.BytesIO(b"a" * 100), limit=10)
    assert gate.read(10) == b"a" * 10 and gate.ends == [10]
    got = []
    th = threading.Thread(target=lambda: got.append(gate.read(5)))
    th.start()
    th.join(0.2)
    assert th.is_alive() and not got  # at the limit, the parser busy: the read waits
    gate.allow(30)
    th.join(5)
    assert got == [b"aaaaa"] and gate.ends == [10, 15]
    gate.allow(15)  # a limit never shrinks
    assert gate.read(15) == b"a" * 15  # up to 30
    th = threading.Thread(target=lambda: got.append(gate.read(50)))
    th.start()
    th.join(0.2)
    assert th.is_alive()
    gate.wanting(True)  # the parser waits for pyarrow: reads go on whatever the limit
    th.join(5)
    assert got[-1] == b"a" * 50 and gate.count == 80
    gate.wanting(False)
    th = threading.Thread(target=lambda: got.append(gate.read(50)))
    th.start()
    th.join(0.2)
    assert th.is_alive()
    gate.close()  # closing (an abandoned read) releases a waiting read
    th.join(5)
    assert not th.is_alive()


def test_csv_blank_lines_are_not_rows(tmp_path):
    (tmp_path / "a.csv").write_bytes(b"\n\ntext\r\none\r\n\r\ntwo\r\nthree")
    assert [(r, t) for r, t, _, _ in rows_of(open_input(str(tmp_path / "a.csv")))] == [(0, b"one"), (1, b"two"), (2, b"three")]


def test_csv_bom_and_cr_line_ends(tmp_path):
    (tmp_path / "a.csv").write_bytes(b"\xef\xbb\xbfid,text\r1,a\r2,b\r")
    src = open_input(str(tmp_path / "a.csv"), id_column="id")
    assert src.columns == ["id", "text"]
    assert [(r, t, i) for r, t, i, _ in rows_of(src)] == [(0, b"a", b"1"), (1, b"b", b"2")]


@pytest.mark.parametrize("ext, compress", [(".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress),
                                         (".XZ", lzma.compress)])
def test_compressed_input(tmp_path, ext, compress):
    data = "text\n" + "".join(f"line {i}\n" for i in range(500))
    (tmp_path / f"a.csv{ext}").write_bytes(compress(data.encode()))
    src = open_input(str(tmp_path / f"a.csv{ext}"))
    assert [t for _, t, _, _ in rows_of(src)] == [f"line {i}".encode() for i in range(500)]


def test_zstd_jsonl(tmp_path):
    import pyarrow as pa

    raw = "".join(json.dumps({"text": f"t{i}"}) + "\n" for i in range(300)).encode()
    with pa.CompressedOutputStream(str(tmp_path / "a.jsonl.zst"), "zstd") as f:
        f.write(raw)
    assert [t for _, t, _, _ in rows_of(open_input(str(tmp_path / "a.jsonl.zst")))] == [f"t{i}" for i in range(300)]


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_xz_damaged_past_its_head_is_said_as_the_other_compressions_are(tmp_path, fmt):
    """A byte of an .xz file changed past its head: lzma's LZMAError is none of the errors a reader catches; it is
    said as a damaged gzip file is, naming the file."""
    rows = [f"sentence {i} of a file long enough to pass its head, {i * 7919 % 10007}" for i in range(60000)]
    text = "".join(json.dumps({"text": r}) + "\n" for r in rows) if fmt == "jsonl" else "text\n" + "\n".join(rows) + "\n"
    data = bytearray(lzma.compress(text.replace(",", "").encode() if fmt == "csv" else text.encode()))
    data[len(data) * 3 // 4] ^= 0xFF
    src = tmp_path / f"d.{fmt}.xz"
    src.write_bytes(bytes(data))
    with pytest.raises(InputError) as e:
        for _ in open_input(str(src)).batches():
            pass
    assert re.fullmatch(rf"{re.escape(str(src))}( near row \d+)?: cannot read the file \(xz: Corrupt input data\)",
                        e.value.what), e.value.what
    assert e.value.fix == "check the file is complete and its compression"


def test_jsonl_batches_and_blank_lines(tmp_path):
    lines = []
    for i in range(50):
        lines.append(json.dumps({"id": i, "text": f"t{i}"}))
        if i % 7 == 0:
            lines.append("   ")
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    src = open_input(str(tmp_path / "a.jsonl"), id_column="id", batch_rows=8)
    sizes = [len(b.rows) for b in src.batches()]
    assert sizes == [8] * 6 + [2]
    assert rows_of(src) == [(i, f"t{i}", i, None) for i in range(50)]


def test_jsonl_nan_and_infinite_texts_are_numbers_not_nulls(tmp_path):
    """NaN / Infinity written in a line are numbers, not missing values: code not-string, named as the line wrote them
    (a null stays a null)."""
    texts = [b"NaN", b"-Infinity", b"1e400", b"null", b'"ok"']
    (tmp_path / "n.jsonl").write_bytes(b"".join(b'{"text": %s, "p": "a"}\n' % t for t in texts)
                                       + b'{"text": "ok", "p": Infinity}\n')
    rows = rows_of(open_input(str(tmp_path / "n.jsonl"), pair_column="p"))
    assert [r[3] for r in rows] == [
        Reason(RejectCode.NOT_STRING, "non-string text (number NaN)"),
        Reason(RejectCode.NOT_STRING, "non-string text (number -Infinity)"),
        Reason(RejectCode.NOT_STRING, "non-string text (number 1e400)"),
        None, None,  # a null text is judged null as the chunk is validated (chunks.decode_cell)
        Reason(RejectCode.NOT_STRING, "non-string pair text (number Infinity)")]


def test_parquet_dataset_row_numbers_and_schema_check(tmp_path):
    d = tmp_path / "ds"
    d.mkdir()
    pq.write_table(pa.table({"text": ["a", "b", "c"]}), d / "p0.parquet", row_group_size=2)
    pq.write_table(pa.table({"text": ["d", None]}), d / "p1.parquet")
    src = open_input(str(d), batch_rows=2)
    assert src.total_rows == 5
    assert rows_of(src) == [(0, "a", None, None), (1, "b", None, None), (2, "c", None, None), (3, "d", None, None),
                            (4, None, None, None)]
    pq.write_table(pa.table({"text": ["x"], "other": [1]}), d / "p2.parquet")
    with pytest.raises(InputError, match="its columns differ from"):
        rows_of(open_input(str(d)))


@pytest.mark.parametrize("second, what, fix", [
    ({"id": [3], "text": ["c"]}, "its columns are in another order than {first}'s (id, text; there: text, id)",
     "a Parquet dataset needs its columns in one order in every file: write each file's columns in the first file's "
     "order (e.g. table.select(names) in pyarrow)"),
    ({"text": ["c"]}, "its columns differ from {first}'s (it lacks id)", None),
    ({"text": ["c"], "idx": [1], "more": [2]}, "its columns differ from {first}'s (it lacks id; it adds idx, more)", None),
])
def test_a_dataset_file_with_other_columns_says_which(tmp_path, second, what, fix):
    """The session's hunt: a file with the same columns in another order was said to have other columns."""
    d = tmp_path / "ds"
    d.mkdir()
    pq.write_table(pa.table({"text": ["a", "b"], "id": [1, 2]}), d / "p1.parquet")
    pq.write_table(pa.table(second), d / "p2.parquet")
    with pytest.raises(InputError) as e:
        open_input(str(d))
    fix = fix or ("a Parquet dataset needs the same columns in every file: write them with one schema, or read the "
                  "files apart")
    assert e.value.render({}) == f"{d / 'p2.parquet'}: {what.format(first=d / 'p1.parquet')} - {fix}"


def test_a_directory_reads_every_parquet_extension_in_any_case_as_a_url_does(tmp_path):
    """.pq and .PARQUET name Parquet files as .parquet does (a file given alone is read as one): a directory's listing
    took *.parquet alone, leaving the others' rows out without a word, while a file:// URL of it read the .pq files."""
    d = tmp_path / "ds"
    d.mkdir()
    for name, texts in (("a.parquet", ["a", "b"]), ("b.pq", ["c"]), ("c.PARQUET", ["d"]), ("d.Pq", ["e"])):
        pq.write_table(pa.table({"text": texts}), d / name)
    (d / "notes.txt").write_text("not data")
    for path in (str(d), f"file://{d}"):
        src = open_input(path)
        assert [os.path.basename(f) for f in src.files] == ["a.parquet", "b.pq", "c.PARQUET", "d.Pq"]
        assert [t for _, t, _, _ in rows_of(src)] == ["a", "b", "c", "d", "e"]


def test_a_directory_says_which_parquet_files_it_left_out_for_a_leading_underscore(tmp_path):
    """A folder leaves out names starting with _ (Spark's and Dask's rule: _SUCCESS, _metadata), a glob of it does not:
    `extract sp` read ids [1, 2] and `extract 'sp/*.parquet'` [8, 1, 2] with no word of the difference (a helper's
    review). The folder's reading is kept and its Parquet files left out so are named, with the glob that reads them."""
    from bertfeat.errors import BertfeatWarning

    d = tmp_path / "my sp"
    (d / "sub").mkdir(parents=True)
    pq.write_table(pa.table({"text": ["a", "b"]}), d / "part-0.parquet")
    pq.write_table(pa.table({"text": ["under"]}), d / "_tmp.parquet")
    pq.write_table(pa.table({"text": ["deep"]}), d / "sub" / "_x.parquet")
    pq.write_table(pa.table({"text": ["hidden"]}), d / ".h.parquet")
    (d / "_SUCCESS").write_bytes(b"")
    with pytest.warns(BertfeatWarning) as w:
        src = open_input(str(d))
    assert [t for _, t, _, _ in rows_of(src)] == ["a", "b"]
    assert [str(x.message) for x in w] == [
        f"{d}: 2 Parquet files left out (_tmp.parquet, sub/_x.parquet): in a folder, names starting with _ are not "
        f"input; to read them, pass a glob, e.g. '{d}/'**/*.parquet"]
    glob_src = open_input(f"{d}/**/*.parquet")
    assert sorted(t for _, t, _, _ in rows_of(glob_src)) == ["a", "b", "deep", "under"]
    (d / "_tmp.parquet").unlink()
    (d / "sub" / "_x.parquet").unlink()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing left out but a hidden file and _SUCCESS: no warning
        open_input(str(d))


def test_not_a_parquet_file(tmp_path):
    (tmp_path / "a.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match=r"a\.parquet: not a readable Parquet file .* - check the file is Parquet and complete"):
        open_input(str(tmp_path / "a.parquet"))


def test_identity_changes_with_the_file(tmp_path):
    (tmp_path / "a.csv").write_text("text\na\n")
    a = open_input(str(tmp_path / "a.csv")).identity()
    (tmp_path / "a.csv").write_text("text\nab\n")
    b = open_input(str(tmp_path / "a.csv")).identity()
    assert a["files"][0]["size"] != b["files"][0]["size"]


# --------------------------------------------------------------------------- the input's two identities
def test_the_within_run_identity_sees_a_copy_and_the_resume_identity_does_not(tmp_path):
    """One stat a file: the within-run identity (ctime, inode, device beside size and mtime) and --resume's (size and
    mtime, the provenance's too). A `cp -p` over the file changes the first only; listing() names the files now."""
    import shutil

    from bertfeat.readers import resume_identity

    f = tmp_path / "a.csv"
    f.write_text("text\na\n")
    src = open_input(str(f))
    st = os.stat(f)
    kept = {"path": str(f), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    during = src.identity(within_run=True)
    assert during == {"path": str(f), "format": "csv", "files": [
        {**kept, "ctime_ns": st.st_ctime_ns, "inode": st.st_ino, "device": st.st_dev}]}
    assert resume_identity(during) == src.identity() == {"path": str(f), "format": "csv", "files": [kept]}
    shutil.copy2(f, tmp_path / "b.csv")
    os.replace(tmp_path / "b.csv", f)
    assert src.identity() == {"path": str(f), "format": "csv", "files": [kept]}
    assert src.identity(within_run=True)["files"][0]["inode"] != st.st_ino
    assert src.listing() == [str(f)]
    f.unlink()
    assert src.listing() == [] and src.identity(removed_ok=True, within_run=True)["files"] == [{"path": str(f), "removed": True}]


def test_jsonl_with_byte_order_mark(tmp_path):
    (tmp_path / "a.jsonl").write_bytes(b'\xef\xbb\xbf{"id": 1, "text": "a"}\n{"id": 2, "text": "b"}\n')
    src = open_input(str(tmp_path / "a.jsonl"), id_column="id")
    assert src.columns == ["id", "text"]
    assert rows_of(src) == [(0, "a", 1, None), (1, "b", 2, None)]


# --------------------------------------------------------------------------- one protocol for both engines
@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl", "parquet"])
def test_partitions_read_back_equal_the_whole_stream(tmp_path, fmt):
    """partitions() + read_partition() (the Dask engine's way) give exactly the rows, values, ids and bad rows of
    batches() (the local engine's way), for a file cut into many partitions, through a pickled reader (a worker's copy)."""

    n = 700
    texts = [f"sentence number {i} " + "x" * (i % 37) for i in range(n)]
    path = tmp_path / f"in.{fmt}"
    if fmt == "parquet":
        pq.write_table(pa.table({"text": texts, "key": [f"k{i}" for i in range(n)]}), path, row_group_size=150)
    elif fmt == "jsonl":
        lines = [json.dumps({"text": t, "key": f"k{i}"}) for i, t in enumerate(texts)]
        lines[100] = "{not json"  # a bad row in place
        lines[400] = ""  # a blank line is not a row
        lines[500] = "   "  # nor one of blanks
        path.write_text("\n".join(lines) + "\n")
    else:
        sep = "," if fmt == "csv" else "\t"
        lines = [f"text{sep}key"] + [f"{t}{sep}k{i}" for i, t in enumerate(texts)]
        lines[101] = f"one{sep}two{sep}three"  # a malformed line in place
        lines[300] = ""  # an empty line is not a row
        lines[301] = "   "  # a line of blanks is (a malformed one)
        path.write_bytes(("\n".join(lines[:600]) + "\r\n" + "\r\n".join(lines[600:]) + "\r\n").encode())
    reader = open_input(str(path), id_column="key")
    whole = rows_of(reader)
    assert len(whole) == n - (2 if fmt == "jsonl" else 1 if fmt != "parquet" else 0)
    assert any(r[3] for r in whole) == (fmt != "parquet")
    parts = reader.partitions(blocksize=4096, target=12)
    assert len(parts) >= 8, parts
    assert rows_by_partitions(reader, parts) == whole


def _bytes_read_by_this_process() -> int:
    with open("/proc/self/io") as fh:
        return int(next(line for line in fh if line.startswith("rchar:")).split()[1])


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs Linux /proc/self/io to count the bytes read")
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_local_text_file_is_read_once(tmp_path, fmt):
    """Opening the input and streaming it reads the file once (plus the 1 MiB head that finds the columns):
    no separate pass counts its lines."""
    n = 60_000
    path = tmp_path / f"big.{fmt}"
    if fmt == "csv":
        path.write_text("id,text\n" + "".join(f"{i},this is sentence number {i} of the file\n" for i in range(n)))
    else:
        path.write_text("".join(json.dumps({"id": i, "text": f"this is sentence number {i} of the file"}) + "\n" for i in range(n)))
    size = path.stat().st_size
    assert size > 2 * HEAD_BYTES
    list(open_input(str(path)).batches())  # warm imports and caches
    before = _bytes_read_by_this_process()
    reader = open_input(str(path))
    rows = sum(len(b.rows) for b in reader.batches())
    read = _bytes_read_by_this_process() - before
    print(f"{fmt}: file {size:,} bytes, read {read:,} bytes ({read / size:.2f}x)")
    assert rows == n
    assert read <= size + HEAD_BYTES + (256 << 10), (read, size)


# --------------------------------------------------------------------------- JSONL ids: the file's first id decides
def _late_ids_lines() -> list[str]:
    """1,001 lines with a null id (none usable in the head's 1,000 lines), a float id (not one), 30 integer ids, 30
    string ids, one more integer id."""
    lines = [json.dumps({"id": None, "text": f"n{i}"}) for i in range(1001)] + [json.dumps({"id": 1.5, "text": "f"})]
    lines += [json.dumps({"id": k if k < 30 else f"s{k}", "text": f"sentence {k}"}) for k in range(60)]
    return lines + [json.dumps({"id": 99, "text": "last"})]


def _bad_ids(rows) -> dict[int, str]:
    return {r: f"{why.code.value}: {render(why.text)}" for r, _, _, why in rows if why is not None}


@pytest.mark.parametrize("compress", [None, "gz"])
def test_jsonl_id_kind_is_the_files_first_id_read_on_past_the_head(tmp_path, compress):
    """No usable id in the head: the file is read on to its first integer-or-string id (row 1002: an integer), which
    decides the output type and seeds every parse, so the partitions (the Dask engine's, at any blocksize, through a
    pickled reader) reject exactly the rows the whole stream rejects (each partition decided on its own first id,
    and id_type() said string while the ids written were integers)."""
    import pickle

    data = ("\n".join(_late_ids_lines()) + "\n").encode()
    path = tmp_path / ("ids.jsonl" + (".gz" if compress else ""))
    path.write_bytes(gzip.compress(data) if compress else data)
    reader = open_input(str(path), id_column="id", batch_rows=16)
    assert reader.id_type() == pa.int64()
    whole = rows_of(reader)
    assert len(whole) == 1063
    bad = {1001: "bad-id: id 1.5 is a number, not a string or an integer; id_column='id:str' reads every id as the line wrote it"}
    bad |= {1002 + k: f'bad-id: id "s{k}" is a string, but the ids before it are integers; id_column=\'id:str\' reads every id as the line wrote it' for k in range(30, 60)}
    assert _bad_ids(whole) == bad  # the null ids are rejected later, as every format's (chunks.validate_batch)
    assert [i for _, _, i, why in whole[1002:] if why is None] == [*range(30), 99]
    worker = pickle.loads(pickle.dumps(reader))
    for blocksize in (2048, 4096, 16384, None):
        parts = reader.partitions(blocksize)
        assert len(parts) == (1 if compress or blocksize is None else -(-path.stat().st_size // blocksize)), blocksize
        first, got = 0, []
        for p in parts:
            b = worker.read_partition(p, first)
            got += rows_in([b])
            first += len(b.rows)
        assert got == whole, blocksize


def test_jsonl_id_kind_without_any_usable_id_and_in_the_head(tmp_path):
    """A file with no integer-or-string id is read to its end once and stays undecided (string: no id is written); a
    head that holds one decides (a later id of the other kind is a bad row)."""
    (tmp_path / "none.jsonl").write_text("".join(json.dumps({"id": None, "text": f"t{i}"}) + "\n" for i in range(1500)))
    reader = open_input(str(tmp_path / "none.jsonl"), id_column="id")
    assert reader.id_type() == pa.string()
    assert _bad_ids(rows_of(reader)) == {}
    (tmp_path / "head.jsonl").write_text("".join(json.dumps({"id": f"s{i}" if i == 3 else i, "text": "t"}) + "\n"
                                                 for i in range(1500)))
    reader = open_input(str(tmp_path / "head.jsonl"), id_column="id")
    assert reader.id_type() == pa.int64()
    assert _bad_ids(rows_of(reader)) == {3: 'bad-id: id "s3" is a string, but the ids before it are integers; id_column=\'id:str\' reads every id as the line wrote it'}


def test_jsonl_id_kind_from_standard_input_is_its_first_id(tmp_path, monkeypatch):
    """Standard input cannot be read on: its one parse decides at the first integer-or-string id, as the file's
    reader does (the same rows, ids and reasons), and the output type is left to the ids written (it was string)."""
    import io
    import sys

    data = ("\n".join(_late_ids_lines()) + "\n").encode()
    (tmp_path / "ids.jsonl").write_bytes(data)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    reader = open_input("-", "jsonl", id_column="id", batch_rows=16)
    assert reader.id_type() is None
    rows = rows_of(reader)
    assert rows == rows_of(open_input(str(tmp_path / "ids.jsonl"), id_column="id"))
    assert sorted(_bad_ids(rows)) == [1001, *range(1032, 1062)]


# --------------------------------------------------------------------------- Parquet: a row group shared by partitions
def _one_row_group(path, n: int) -> None:
    """n rows in one row group: text (a few nulls), an int32 id, a dictionary kept column."""
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
    texts = [None if i % 997 == 5 else " ".join(words[(i * 7 + k * 3) % 10] for k in range(i % 23 + 1)) + f" {i}"
             for i in range(n)]
    split = pa.array([("train", "test", "dev")[i % 3] for i in range(n)]).dictionary_encode()
    pq.write_table(pa.table({"text": texts, "key": pa.array(range(n), pa.int32()), "split": split}), path,
                   row_group_size=n)


def test_parquet_partitions_inside_one_row_group_equal_the_whole_read(tmp_path):
    """A row group cut into many partitions (row ranges inside it): read_partition's rows, ids, kept values and bad
    rows, in order, are batches()'s, at several cuts."""
    import pickle

    path = tmp_path / "one.parquet"
    _one_row_group(path, 5000)
    reader = open_input(str(path), id_column="key", keep=["split"])
    assert pq.ParquetFile(path).metadata.num_row_groups == 1
    whole = [(r, t, i, s) for b in reader.batches() for r, t, i, s in zip(b.rows, b.texts, b.ids, b.extra["split"])]
    worker = pickle.loads(pickle.dumps(reader))
    for blocksize, target in ((4096, None), (16384, 7), (None, 3), (None, None)):
        parts = reader.partitions(blocksize, target)
        assert len(parts) > 1 or (blocksize, target) == (None, None), parts
        first, got = 0, []
        for p in parts:
            b = worker.read_partition(p, first)
            assert len(b.rows) == p.n_rows == worker.count_rows(p)
            got += list(zip(b.rows, b.texts, b.ids, b.extra["split"]))
            first += len(b.rows)
        assert got == whole, (blocksize, target)


_PEAK = """
import json, sys
import pyarrow as pa
from bertfeat.readers import open_input
r = open_input(sys.argv[1], id_column="key")
parts = r.partitions(int(sys.argv[2]), None)
k = len(parts) * 3 // 4
first = sum(p.n_rows for p in parts[:k])
before = pa.default_memory_pool().max_memory()
b = r.read_partition(parts[k], first)
print(json.dumps({"before": before, "peak": pa.default_memory_pool().max_memory(), "parts": len(parts),
                  "rows": len(b.rows), "first": b.rows[0], "want": first, "n_rows": parts[k].n_rows}))
"""


def test_parquet_partition_memory_is_bounded_by_the_partition_not_the_row_group(tmp_path):
    """A partition three quarters into a large row group is read in a fresh process: Arrow's peak memory is a small
    part of the row group's decoded size (the whole row group was read and decoded, then sliced: a task's memory was
    bounded by the row group, not --blocksize)."""
    import subprocess
    import sys

    path = tmp_path / "big.parquet"
    _one_row_group(path, 500_000)
    group = pq.ParquetFile(path).metadata.row_group(0)
    decoded = group.total_byte_size  # uncompressed
    assert decoded > 36 << 20, decoded
    out = subprocess.run([sys.executable, "-c", _PEAK, str(path), str(256 << 10)], capture_output=True, text=True,
                         check=True).stdout
    got = json.loads(out)
    print(f"row group {decoded / 2**20:.1f} MiB decoded; {got['parts']} partitions; one partition's Arrow peak "
          f"{got['peak'] / 2**20:.1f} MiB (before the read {got['before'] / 2**20:.1f} MiB)")
    assert (got["rows"], got["first"]) == (got["n_rows"], got["want"]) and got["parts"] >= 20
    assert got["peak"] < decoded / 3, (got, decoded)


def test_gzip_sizes_read_from_the_trailer_and_the_position_kept(tmp_path):
    from bertfeat.readers.stream import gzip_sizes

    data = b"x" * 100_000
    p = tmp_path / "a.gz"
    p.write_bytes(gzip.compress(data))
    with open(p, "rb") as fh:
        fh.read(3)
        assert gzip_sizes(fh) == (p.stat().st_size, len(data))
        assert fh.tell() == 3
    assert gzip_sizes(io.BytesIO(b"")) is None  # no trailer: the ratio read so far


def test_two_spellings_of_a_text_column_name_are_refused(tmp_path):
    (tmp_path / "a.csv").write_text("Text,TEXT\nx,y\n")
    with pytest.raises(InputError) as e:
        open_input(str(tmp_path / "a.csv"))
    assert str(e.value) == (f"{tmp_path / 'a.csv'}: the columns Text, TEXT could each be the text - pass "
                            "text_column='NAME' with the one to encode")
    (tmp_path / "b.jsonl").write_text('{"Text": "x", "text": "y"}\n')
    assert open_input(str(tmp_path / "b.jsonl")).text_column == "text"


def test_a_parquet_file_compressed_whole_is_refused_by_name(tmp_path):
    import gzip

    pq.write_table(pa.table({"text": ["a b"]}), tmp_path / "p.parquet")
    (tmp_path / "p.parquet.gz").write_bytes(gzip.compress((tmp_path / "p.parquet").read_bytes()))
    with pytest.raises(InputError) as e:
        open_input(str(tmp_path / "p.parquet.gz"))
    assert str(e.value) == (f"{tmp_path / 'p.parquet.gz'}: a Parquet file compressed as a whole (.gz) cannot be read - "
                            "decompress it first (Parquet compresses its own pages, so the .parquet itself is as small)")


@pytest.mark.parametrize("compress", [None, "gz"])
def test_a_quoted_crlf_across_a_block_boundary_keeps_its_lf(tmp_path, monkeypatch, compress):
    """pyarrow's streaming reader dropped the LF of a quoted CRLF whose CR ended a block ('line one\\r\\nline two'
    read back as 'line one\\rline two', rc 0): a CSV as Excel writes it, at every 4 MiB boundary. Every offset of
    the CR against the block is tried; every value reads back as written."""
    import gzip

    block = 256
    monkeypatch.setattr(CsvReader, "CSV_BLOCK_BYTES", block)
    head = b"id,note\r\n"
    rows = [b'%d,"%s\r\nline two"\r\n' % (i, b"x" * i) for i in range(2 * block)]  # a CR at each offset in turn
    data = head + b"".join(rows)
    path = tmp_path / ("a.csv.gz" if compress else "a.csv")
    path.write_bytes(gzip.compress(data) if compress else data)
    src = open_input(str(path), text_column="note", id_column="id")
    got = [(r[2], r[1]) for r in rows_of(src)]
    assert got == [(b"%d" % i, b"x" * i + b"\r\nline two") for i in range(2 * block)]


CUT = "part of a line that a carriage return alone (CR){} cuts into rows ({}): a CR ends a row as a line end does, " \
      "but this file's lines end in line feeds"


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_a_cr_alone_in_a_value_makes_each_part_of_its_line_a_bad_row(tmp_path, fmt, eol):
    """pyarrow ends a row at a CR alone: a file of line feeds (or CRLFs) with a CR in a value was read as two rows
    holding its parts, each read as a row when its fields' count happened to fit (a text encoded cut in two, a kept
    value or an id cut short, a row too many), the other part a malformed line that did not say why. Each part is a
    bad row naming the column and showing the line; the columns before the CR in a first part of as many fields as the
    header keep their values (the rejects file shows them); the rows around, and a malformed line after, keep their numbers as pyarrow counts rows."""
    sep = "," if fmt == "csv" else "\t"
    shown = sep.replace("\t", "\\t")
    lines = ["id,text,note", "a,first,n1", "b,hello\rworld,n2", "c,third,n3\rmore", "d,one,two,three", "e,last,n5"]
    path = tmp_path / f"in.{fmt}"
    path.write_bytes((eol.join(line.replace(",", sep) for line in lines) + eol).encode())
    src = open_input(str(path), id_column="id", keep=["note"])
    got = []
    for b in src.batches():
        got += [(r, b.texts[k], b.ids[k], b.extra["note"][k], b.pre_rejected.get(r)) for k, r in enumerate(b.rows)]
    in_text = Reason(RejectCode.LONE_CR, CUT.format(" in column 'text'", f'"b{shown}hello\\rworld{shown}n2"'))
    in_note = Reason(RejectCode.LONE_CR, CUT.format(" in column 'note'", f'"c{shown}third{shown}n3\\rmore"'))
    assert got[:5] == [(0, b"first", b"a", "n1", None), (1, None, None, None, in_text), (2, None, None, None, in_text),
                       (3, None, b"c", None, in_note), (4, None, None, None, in_note)]  # (row 1: too few fields)
    assert got[5][:4] == (5, None, None, None) and got[5][4].code == RejectCode.MALFORMED_LINE
    assert got[6:] == [(6, b"last", b"e", "n5", None)]


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_a_cr_alone_is_found_at_every_offset_of_a_block_and_a_partition(tmp_path, monkeypatch, fmt):
    """A CR alone (and its line) at every offset against pyarrow's blocks (the read-ahead gate holds a block's last CR
    for its next read) and the Dask engine's byte ranges: each part of a cut line is a bad row, every other row is read
    as written, and the partitions read back equal the whole stream."""

    monkeypatch.setattr(CsvReader, "CSV_BLOCK_BYTES", 256)
    sep = "," if fmt == "csv" else "\t"
    lines = ["key" + sep + "text"]
    for i in range(300):
        lines += [f"c{i}{sep}clean {i}", f"k{i}{sep}" + "x" * i + "\ry"]
    path = tmp_path / f"in.{fmt}"
    path.write_bytes(("\r\n".join(lines[:200]) + "\n" + "\n".join(lines[200:]) + "\n").encode())
    reader = open_input(str(path), id_column="key")
    whole = rows_of(reader)
    assert [(r, t, i) for r, t, i, why in whole if why is None] == [(3 * i, b"clean %d" % i, b"c%d" % i)
                                                                   for i in range(300)]
    assert {why.code for _, _, _, why in whole if why is not None} == {RejectCode.LONE_CR} and len(whole) == 900
    parts = reader.partitions(blocksize=1024, target=64)
    assert len(parts) >= 20
    assert rows_by_partitions(reader, parts) == whole


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
@pytest.mark.parametrize("header_eol", ["\n", "\r\n"])
def test_crs_that_leave_a_line_one_row_are_read_at_every_offset(tmp_path, monkeypatch, fmt, header_eol):
    """A CR right before a line end (rows ending \\r\\r\\n: csv.writer on Windows, a file opened without newline='')
    or at the start of a line leaves pyarrow one row, the other piece a blank line it skips: the row is read as written,
    the CR dropped (as a CRLF's). Those rows were refused as lone-cr. A line that CRs cut into two values or more
    (\\rhello\\rworld, a\\r\\r...b, a run of CRs longer than a block) is still refused, part by part, at every offset
    of a block and a Dask byte range; the partitions read back equal the whole stream."""

    monkeypatch.setattr(CsvReader, "CSV_BLOCK_BYTES", 256)
    sep = "," if fmt == "csv" else "\t"
    lines, want = [], []  # want: (text, id) of a row read, None for a lone-cr part
    for i in range(200):
        lines.append(f"h{i}{sep}" + "x" * i + "\r" * (1 + i % 3) + "\n")
        want.append((b"x" * i, b"h%d" % i))
        lines.append(f"\r{'' if i % 2 else chr(13)}s{i}{sep}start {i}\n")
        want.append((b"start %d" % i, b"s%d" % i))
        if i % 20 == 0:
            lines.append(f"\rk{i}{sep}hello\r" + "\r" * (i * 3) + "world\n")
            want += [None, None]
    path = tmp_path / f"in.{fmt}"
    path.write_bytes(f"key{sep}text{header_eol}".encode() + "".join(lines).encode())
    reader = open_input(str(path), id_column="key")
    whole = rows_of(reader)
    assert [None if why is not None and why.code == RejectCode.LONE_CR else (t, i) for _, t, i, why in whole] == want
    parts = reader.partitions(blocksize=1024, target=64)
    assert len(parts) >= 10
    assert rows_by_partitions(reader, parts) == whole


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
@pytest.mark.parametrize("tail", ["world\n", "\n"])
def test_a_run_of_crs_longer_than_the_read_ahead_is_judged_whole(tmp_path, monkeypatch, fmt, tail):
    """A run of CRs between two values longer than the reader reads ahead of pyarrow (1 MiB past its blocks): the row
    the first CR ended was handed out before the tracker saw what follows the run, so its text was read as a row
    ('hello' encoded) while the part after the run was refused as lone-cr. The row now waits until the run ends: both
    parts are bad rows; a run that ends at the line's line feed leaves one row, read whole. Both engines."""
    monkeypatch.setattr(CsvReader, "CSV_BLOCK_BYTES", 1 << 16)
    sep = "," if fmt == "csv" else "\t"
    path = tmp_path / f"in.{fmt}"
    path.write_bytes(f"key{sep}text\nk0{sep}before\nk1{sep}hello".encode() + b"\r" * ((1 << 20) + (1 << 18))
                     + f"{tail}k2{sep}after\n".encode())
    reader = open_input(str(path), id_column="key")
    whole = rows_of(reader)
    got = [(r, t, i, why and why.code) for r, t, i, why in whole]
    if tail == "\n":
        assert got == [(0, b"before", b"k0", None), (1, b"hello", b"k1", None), (2, b"after", b"k2", None)]
    else:
        assert got == [(0, b"before", b"k0", None), (1, None, b"k1", RejectCode.LONE_CR),
                       (2, None, None, RejectCode.LONE_CR), (3, b"after", b"k2", None)]
    assert rows_by_partitions(reader, reader.partitions(blocksize=1 << 19)) == whole


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_a_bom_on_a_line_of_its_own_is_a_blank_line_before_the_header(tmp_path, fmt):
    """pyarrow skips a UTF-8 BOM at the start of a file, so a BOM then a line end is a blank line and the header is the
    next line. The quote tracker took the BOM's line for the header: every row it names was the next one, so a line a
    CR alone cut had its first part read as a row (the text 'wor' encoded) and the row after it refused as lone-cr
    (b'three' written before the CR check); the Dask engine's later byte ranges took the BOM's line as their header
    (an error naming no column 'text'), and a ';' header was not sniffed (one column 'id;text')."""

    sep = "," if fmt == "csv" else "\t"
    path = tmp_path / f"in.{fmt}"
    lines = ["id,text", "1,hello", "2,wor\rld", "3,three"] + [f"{i},row number {i}" for i in range(4, 300)]
    path.write_bytes(b"\xef\xbb\xbf\n" + "\n".join(line.replace(",", sep) for line in lines).encode() + b"\n")
    reader = open_input(str(path), id_column="id")
    whole = rows_of(reader)
    assert [(r, t, i) for r, t, i, _ in whole[:5]] == [(0, b"hello", b"1"), (1, None, b"2"), (2, None, None),
                                                      (3, b"three", b"3"), (4, b"row number 4", b"4")]
    assert [why and why.code for *_, why in whole] == [None, RejectCode.LONE_CR, RejectCode.LONE_CR] + [None] * 297
    parts = reader.partitions(blocksize=1024, target=64)
    assert len(parts) > 3 and parts[1].header == f"id{sep}text\n".encode()
    assert rows_by_partitions(reader, parts) == whole
    (tmp_path / "semi.csv").write_bytes(b"\xef\xbb\xbf\r\nid;text\r\n1;hello\r\n")
    semi = open_input(str(tmp_path / "semi.csv"), id_column="id")
    assert (semi.columns, semi.delimiter, rows_of(semi)) == (["id", "text"], ";", [(0, b"hello", b"1", None)])


def test_a_json_array_or_object_file_or_cr_line_ends_are_named_for_what_they_are(tmp_path):
    """A pretty-printed .json array was 'row 0: invalid JSON'; a JSONL with CR-only line ends was told it might be
    CSV."""
    # (a pretty-printed object was "not JSON (Expecting property name ...)": a helper's review)
    for name, text, what, fix in (
            ("a", '[\n  {"text": "a"},\n  {"text": "b"}\n]\n', "a JSON array over several lines (one document)",
             "write one object per line, e.g. jq -c '.[]'"),
            ("o", '{\n  "text": "a",\n  "id": 1\n}\n{\n  "text": "b"\n}\n', "a JSON object over several lines "
             "(pretty-printed)", "write each object on one line, e.g. jq -c .")):
        (tmp_path / f"{name}.json").write_text(text)
        with pytest.raises(InputError) as e:
            open_input(str(tmp_path / f"{name}.json"))
        assert str(e.value) == (f"{tmp_path / f'{name}.json'}: {what}, not JSON Lines (one object per line) - {fix} "
                                f"{tmp_path / f'{name}.json'} > {name}.jsonl")
    (tmp_path / "c.jsonl").write_bytes(b'{"text": "a"}\r{"text": "b"}\r')
    with pytest.raises(InputError, match=r"c\.jsonl: its lines end in CR alone \(old Mac line ends\), which JSON Lines "
                                         r"does not take - convert the line ends"):
        open_input(str(tmp_path / "c.jsonl"))
    (tmp_path / "ok.jsonl").write_text('{"text": "a"}\n[1, 2]\n')  # an array on a line of its own: a bad row, as before
    assert open_input(str(tmp_path / "ok.jsonl")).text_column == "text"
    # a first line that is an object gone wrong (a trailing comma) stays a bad row with the JSON error
    (tmp_path / "comma.jsonl").write_text('{"text": "a",}\n{"text": "b"}\n')
    rows = rows_of(open_input(str(tmp_path / "comma.jsonl")))
    assert [why and why.code for *_, why in rows] == [RejectCode.INVALID_JSON, None]


def test_a_jsonl_id_that_is_a_number_is_named_as_the_line_wrote_it(tmp_path, capsys):
    """A bad id was named as Python prints the float (1e2 as 100.0, 2.50 as 2.5): the rejects file showed a value
    the file does not hold. Its id cell was empty (found by the writers audit): the row could not be joined by its id;
    it is the id as the line wrote it, a boolean or an array as JSON text."""
    from extract_util import run, tiny_model

    src = tmp_path / "n.jsonl"
    src.write_text('{"id": 1, "text": "one"}\n{"id": 1e2, "text": "two"}\n{"id": 2.50, "text": "three"}\n'
                   '{"id": -0.0, "text": "four"}\n{"id": true, "text": "five"}\n{"id": [1, "é"], "text": "six"}\n'
                   '{"id": -0, "text": "seven"}\n{"id": null, "text": "eight"}\n')
    rc, _, err = run(capsys, "extract", src, "--model", tiny_model(), "--id-column", "id", "--on-bad-row", "skip", "-q")
    assert rc == 0, err
    assert (tmp_path / "n.features.parquet.rejects.csv").read_text(encoding="utf-8").splitlines() == [
        "row,id,reason", "1,1e2,\"id 1e2 is a number, not a string or an integer; --id-column id:str reads every id as the line wrote it\"",
        "2,2.50,\"id 2.50 is a number, not a string or an integer; --id-column id:str reads every id as the line wrote it\"",
        "3,-0.0,\"id -0.0 is a number, not a string or an integer; --id-column id:str reads every id as the line wrote it\"",
        "4,true,\"id true is a boolean, not a string or an integer\"",
        '5,"[1, ""é""]","id [1, ""\\u00e9""] is an array, not a string or an integer"',
        '6,-0,"id -0 would be written back as 0 (an integer id has no sign of zero): write it 0, or as the string ""-0"" '
        '(with every id a string); --id-column id:str reads every id as the line wrote it"', "7,,null id"]


def test_an_input_path_with_an_unexpanded_tilde_is_said_so(tmp_path, monkeypatch):
    """bertfeat.extract('~/x.csv') said "~/x.csv: no such file - check the path" (Python expands no ~): the path it
    stands for is named now. A file whose path does start with a folder named ~ is read as given."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(InputError) as e:
        open_input("~/x.csv")
    assert e.value.message == ("~/x.csv: no such file: it starts with ~, which no shell expanded (bertfeat takes a path "
                               f"as it is given) - give the path itself, {tmp_path}/home/x.csv")
    (tmp_path / "~").mkdir()
    (tmp_path / "~" / "x.csv").write_text("text\nhello\n")
    assert open_input("~/x.csv").text_column == "text"


def test_a_glob_with_an_unexpanded_tilde_is_said_so(tmp_path, monkeypatch, capsys):
    """A quoted '~/d/*.csv' (no shell expanded the ~) said only "the pattern matches no file - check the glob pattern
    (quote it so the shell does not expand it)", a fix the user had followed: it names the ~ now, and the pattern it
    stands for. A folder that is named ~ is read as given."""
    from bertfeat.cli.app import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "d").mkdir(parents=True)
    (tmp_path / "home" / "d" / "a.csv").write_text("text\nhello\n")
    why = "the pattern matches no file: it starts with ~, which no shell expanded (bertfeat takes a path as it is given)"
    with pytest.raises(InputError) as e:
        open_input("~/d/*.csv")
    assert e.value.message == (f"~/d/*.csv: {why} - give the pattern with the folder written out, "
                               f"'{tmp_path}/home/d/*.csv', or quote the pattern after the ~ alone: ~/'d/*.csv'")
    assert main(["extract", "~/d/*.csv", "-o", str(tmp_path / "o.parquet"), "-q"]) == 1
    assert capsys.readouterr().err.startswith(f"Error: ~/d/*.csv: {why} - give the pattern")
    (tmp_path / "~").mkdir()
    (tmp_path / "~" / "a.csv").write_text("text\nhello\n")
    assert open_input("~/*.csv").text_column == "text"


HEADER_AGAIN = ("the header line again ({}), as where the next file starts in files joined with their header lines "
                "(cat a.{fmt} b.{fmt} > all.{fmt})")


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_a_header_line_again_is_a_bad_row_at_every_offset(tmp_path, monkeypatch, fmt):
    """CSV / TSV files joined with cat (each with its header line; one with CRLF line ends, one with a UTF-8 BOM)
    had every later header read as a row: the names encoded as a text, the id 'id' written, and a kept int column
    decided str by the header in the head. Each is a bad row (code repeated-header, no value kept), at every offset of
    pyarrow's blocks and of the Dask engine's byte ranges; the rows around keep their numbers; a line that differs in
    field is a row."""
    monkeypatch.setattr(CsvReader, "CSV_BLOCK_BYTES", 256)
    sep = "," if fmt == "csv" else "\t"
    header = f"id{sep}text{sep}label"
    lines, want = [header], []
    for i in range(600):
        if i % 37 == 5:
            lines.append(("\ufeff" if i % 2 else "") + header)
            want.append(None)
        lines.append(f"r{i}{sep}{'texts' if i == 7 else 'sentence'} {i}{sep}{i % 3}")
        want.append((f"{'texts' if i == 7 else 'sentence'} {i}".encode(), f"r{i}".encode(), i % 3))
    lines.insert(3, f"ids{sep}text{sep}1")  # a line that is not the header's: a row
    want.insert(2, (b"text", b"ids", 1))
    path = tmp_path / f"in.{fmt}"
    path.write_bytes(("\r\n".join(lines[:100]) + "\n" + "\n".join(lines[100:]) + "\n").encode())
    reader = open_input(str(path), id_column="id", keep=["label"])
    assert reader.keep_types()["label"] == pa.int64()
    got, why = [], {}
    for b in reader.batches():
        for k, r in enumerate(b.rows):
            reason = b.pre_rejected.get(r)
            if reason is not None and reason.code == RejectCode.REPEATED_HEADER:
                assert (b.texts[k], b.ids[k], b.extra["label"][k]) == (None, None, None)
                got.append(None)
                why[reason.text] = why.get(reason.text, 0) + 1
            else:
                got.append((b.texts[k], b.ids[k], b.extra["label"][k]))
    assert got == want
    shown = json.dumps(header)
    assert why == {HEADER_AGAIN.format(shown, fmt=fmt): 17}
    parts = reader.partitions(blocksize=1024, target=64)
    assert len(parts) >= 8
    whole = rows_of(reader)
    assert rows_by_partitions(reader, parts) == whole
    data, h = path.read_bytes(), header.encode()
    starts = [m.start() + 1 for m in re.finditer(b"\n(?=(?:\xef\xbb\xbf)?" + re.escape(h) + b")", data)]
    assert len(starts) == 17
    for at in starts[:4] + starts[-3:]:  # a byte range that starts at the header line again (read_block: after the \n)
        parts = reader.partitions(blocksize=at - 1)
        assert any(p.offset == at - 1 for p in parts)
        assert rows_by_partitions(reader, parts) == whole, at


def test_a_header_line_quoted_otherwise_is_a_bad_row_too(tmp_path, monkeypatch):
    """Files two writers wrote, joined: pandas' header id,text,label and R's or QUOTE_ALL's "id","text","label". The
    repeat was compared byte for byte, so it was read as a row (text 'text', id 'id', exit 0). A CSV line whose values,
    quotes undone, are the header's names is the header again, at every offset of pyarrow's blocks and of the Dask
    engine's byte ranges; a line with the names in other fields ("id,text",label) is a row, and in TSV, where quotes
    are part of a value, "id" is no header name."""
    monkeypatch.setattr(CsvReader, "CSV_BLOCK_BYTES", 256)
    forms = ['"id","text","label"', 'id,"text",label', '\ufeff"id",text,"label"', '"id",text,label']
    lines, want = ["id,text,label"], []
    for i in range(300):
        if i % 29 == 3:
            lines.append(forms[(i // 29) % len(forms)])
            want.append(None)
        lines.append(f"r{i},sentence {i},{i % 3}")
        want.append((f"sentence {i}".encode(), f"r{i}".encode(), i % 3))
    lines.insert(2, '"id,text",label,2')  # the names, but not as the header's fields: a row
    want.insert(1, (b"label", b"id,text", 2))
    path = tmp_path / "in.csv"
    path.write_bytes(("\n".join(lines) + "\n").encode())
    reader = open_input(str(path), id_column="id", keep=["label"])
    got = []
    for b in reader.batches():
        for k, r in enumerate(b.rows):
            reason = b.pre_rejected.get(r)
            bad = reason is not None and reason.code == RejectCode.REPEATED_HEADER
            got.append(None if bad else (b.texts[k], b.ids[k], b.extra["label"][k]))
    assert got == want
    parts = reader.partitions(blocksize=700, target=64)
    assert len(parts) >= 8
    assert rows_by_partitions(reader, parts) == rows_of(reader)
    tsv = tmp_path / "in.tsv"
    tsv.write_bytes(b'id\ttext\n1\thello\n"id"\t"text"\n')
    assert [(i, t, why) for _, t, i, why in rows_of(open_input(str(tsv), id_column="id"))] == [
        (b"1", b"hello", None), (b'"id"', b'"text"', None)]


@pytest.mark.parametrize("data", [b"text\nhello\ntext\nbye\n", b"word,\napple,\nword,\nbye,\n",
                                  b"\xef\xbb\xbftext\nhello\n\xef\xbb\xbftext\nbye\n"])
def test_a_one_column_files_value_may_be_its_columns_name(tmp_path, data):
    """A file of one named column (a blank one beside it from trailing commas too) may hold its column's name as a
    value (a word list headed 'word' holds the word 'word'): that line is read as a row, never refused."""
    path = tmp_path / "words.csv"
    path.write_bytes(data)
    lines = [line.rstrip(b",") for line in data.split(b"\n")]
    got = [(r, t, why) for r, t, _, why in rows_of(open_input(str(path), text_column=lines[0].lstrip(b"\xef\xbb\xbf").decode()))]
    assert got == [(0, lines[1], None), (1, lines[2], None), (2, b"bye", None)]


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl"])
def test_a_glob_of_text_files_says_how_to_join_them(tmp_path, fmt):
    """A glob of CSV / TSV / JSONL files is refused; joining CSVs with cat keeps every file's header line (each a
    bad row, repeated-header), so the fix shows a line that keeps the first file's header alone."""
    for name in ("a", "b"):
        (tmp_path / f"{name}.{fmt}").write_text('{"text": "x"}\n' if fmt == "jsonl" else "text\nx\n")
    pattern = str(tmp_path / f"*.{fmt}")
    with pytest.raises(InputError) as e:
        open_input(pattern)
    how = (f"awk 'NR == 1 || FNR > 1' {pattern} > all.{fmt}, which keeps the first file's header line alone"
           if fmt != "jsonl" else f"cat {pattern} > all.jsonl")
    assert e.value.message == (f"{pattern}: a glob of {fmt.upper()} files is not supported - concatenate them ({how}) "
                               "and pass that file, or convert them to Parquet")


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_compressed_text_files_are_decompressed_before_they_are_joined(tmp_path, fmt):
    """A glob (or folder) of .csv.gz / .jsonl.gz files was told to join them with awk or cat as they are: the line wrote
    gzip bytes into all.csv / all.jsonl (a folder's, d/*.csv, matched none of them). The line decompresses them first."""
    import gzip

    for name in ("a", "b"):
        (tmp_path / f"{name}.{fmt}.gz").write_bytes(gzip.compress(b'{"text": "x"}\n' if fmt == "jsonl" else b"text\nx\n"))
    pattern = str(tmp_path / f"*.{fmt}.gz")
    with pytest.raises(InputError) as e:
        open_input(pattern)
    plain = str(tmp_path / f"*.{fmt}")
    how = (f"awk 'NR == 1 || FNR > 1' {plain} > all.csv, which keeps the first file's header line alone" if fmt == "csv"
           else f"cat {plain} > all.jsonl")
    assert e.value.message == (f"{pattern}: a glob of {fmt.upper()} files is not supported - concatenate them (gunzip "
                               f"-k {pattern}, then {how}) and pass that file, or convert them to Parquet")
    if fmt == "csv":
        with pytest.raises(InputError) as e:
            open_input(str(tmp_path))
        assert e.value.message.endswith(f"- pass one file, join them into one (e.g. gunzip -k {pattern}, then awk "
                                        f"'NR == 1 || FNR > 1' {plain} > all.csv, which keeps one header line), or "
                                        "convert them to Parquet")


@pytest.mark.parametrize("fmt, text, first", [
    ("jsonl", '{"id": 1, "text": "hello world"}\n{"id": 2, "text": "good day"}\n', '{"id": 1, "text": "hello world"}'),
    ("csv", "id,text\n1,hello world\n2,good day\n", "id,text"),
    ("tsv", "id\ttext\n1\thello world\n2\tgood day\n", "id\ttext")])
@pytest.mark.parametrize("codec", ["cp037", "cp500"])
def test_ebcdic_text_is_named_and_reads_with_its_code_page(tmp_path, fmt, text, first, codec):
    """EBCDIC text (a mainframe's) was "not JSON ('utf-8' codec can't decode byte 0xc0 ...)" with a hint that it may be
    CSV (JSONL), or "invalid utf-8 at byte 0" with --encoding latin-1 as the example (CSV), which read it as letters
    no one wrote; and JSONL could not be read in it at all (its line feed is 0x25, the file one line). It is named, with
    its code page; read so, every format gives its rows, on both engines' paths."""
    path = tmp_path / f"in.{fmt}"
    path.write_bytes(text.encode(codec))
    for given, named in (("utf-8", "utf-8"), ("latin-1", "iso8859-1")):
        with pytest.raises(InputError) as e:
            open_input(str(path), encoding=given)
        assert e.value.message == (f"{path}: its bytes look like EBCDIC text (read as cp037, its first line is "
                                   f"{first!r}), not {named} - pass encoding='cp037' (or the file's own EBCDIC code "
                                   "page, e.g. cp500 or cp273: they differ in a few characters)")
    reader = open_input(str(path), encoding=codec, id_column="id")
    got = [(r, t if isinstance(t, str) else t.decode(), i) for r, t, i, _ in rows_of(reader)]
    assert [(r, t, str(i if isinstance(i, int) else i.decode())) for r, t, i in got] == [(0, "hello world", "1"),
                                                                                       (1, "good day", "2")]
    assert rows_by_partitions(reader, reader.partitions(blocksize=16, target=4)) == rows_of(reader)


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_an_ebcdic_file_longer_than_the_head_reads_with_its_code_page(tmp_path, fmt):
    """The head was read up to its first 0x0a, which EBCDIC text has not (its line feed is 0x25): a file longer than
    the head's limit (2 x max_field_bytes, 8 MiB by default) was refused with the code page its message asked for
    (CSV: "its first line runs past the ... bytes read to find the columns"; JSONL: "its first 1 line(s) are each
    longer than a row may be"), and a JSONL one read as UTF-8 was not named EBCDIC (the same "longer than" words,
    after reading the whole file to find a line end)."""
    n = 40_000  # about 1.4 MB, over the head's 1 MiB limit at max_field_bytes 256 KiB
    lines = ["text,id", *(f"hello world number {i},{i}" for i in range(n))] if fmt == "csv" else [
        json.dumps({"text": f"hello world number {i}", "id": i}) for i in range(n)]
    path = tmp_path / f"in.{fmt}"
    path.write_bytes(("\n".join(lines) + "\n").encode("cp037"))
    assert path.stat().st_size > 1 << 20
    with pytest.raises(InputError) as e:
        open_input(str(path), max_field_bytes=1 << 18)
    assert e.value.message.startswith(f"{path}: its bytes look like EBCDIC text (read as cp037, ")
    reader = open_input(str(path), encoding="cp037", id_column="id", keep=("id",), max_field_bytes=1 << 18)
    got = rows_of(reader)
    assert len(got) == n and (got[-1][0], _text(got[-1][1])) == (n - 1, f"hello world number {n - 1}")
    assert reader.keep_types()["id"] == pa.int64()


def _text(t) -> str:
    return t if isinstance(t, str) else t.decode()


@pytest.mark.parametrize("text", ["Привет, как дела? Это тестовое предложение.", "这是一个测试句子，用于检查编码。",
                                  "Αυτή είναι μια δοκιμαστική πρόταση.", "هذه جملة اختبار للتحقق من الترميز.",
                                  "これはテスト文です。", "이것은 테스트 문장입니다.", "😀😃😄😁😆😅🤣😂",
                                  "यह एक परीक्षण वाक्य है।", "นี่คือประโยคทดสอบ"])
def test_utf8_text_of_other_scripts_is_not_taken_for_ebcdic(tmp_path, text):
    """Text whose bytes are mostly over 0x7f (UTF-8 of other scripts, as EBCDIC's letters are) reads as UTF-8."""
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"text": f"{text} {i}"}, ensure_ascii=False) + "\n" for i in range(50)),
                    encoding="utf-8")
    assert rows_of(open_input(str(path)))[0][1] == f"{text} 0"


def test_a_jsonl_file_in_another_encoding_says_so_as_csv_does(tmp_path):
    """A Latin-1 JSONL whose first lines are each invalid UTF-8 was "not JSON ('utf-8' codec can't decode ...); ... if the
    file is CSV or TSV, pass input_format='csv'"; it names the encoding as the CSV reader does for the same bytes."""
    lines = ['{"text": "café"}', '{"text": "naïve"}']
    path = tmp_path / "in.jsonl"
    path.write_bytes("\n".join(lines).encode("latin-1") + b"\n")
    with pytest.raises(InputError) as e:
        open_input(str(path))
    assert e.value.message == (f"{path} line 1: invalid utf-8 at byte 13 of the line, and none of its first 2 line(s) "
                               "is a JSON object - pass encoding with the file's encoding (e.g. encoding='latin-1')")
    assert [t for _, t, _, _ in rows_of(open_input(str(path), encoding="latin-1"))] == ["café", "naïve"]


def test_jsonl_files_joined_with_their_byte_order_marks_read_alike_on_both_engines(tmp_path):
    """JSONL files joined with cat, each starting with a UTF-8 BOM (and a line that is a BOM alone): a BOM at a later
    line's start made it a bad row ("invalid JSON (Unexpected UTF-8 BOM ...)") on the local engine, but a Dask byte range
    starting at that line dropped it and read the row (a BOM alone: a row there, none here; count_rows disagreed too).
    Every line's BOM is dropped now, as the file's first is: the same rows on both, wherever a range starts."""
    files = [b"\xef\xbb\xbf" + b"".join(json.dumps({"id": f * 100 + i, "text": f"row {f} {i} " + "x" * 40}).encode() + b"\n"
                                        for i in range(60)) for f in range(3)]
    data = files[0] + files[1] + b"\xef\xbb\xbf\n" + files[2]
    path = tmp_path / "all.jsonl"
    path.write_bytes(data)
    reader = open_input(str(path), id_column="id")
    whole = rows_of(reader)
    assert [(i, t) for _, t, i, why in whole if why is None] == [(f * 100 + i, f"row {f} {i} " + "x" * 40)
                                                                 for f in range(3) for i in range(60)]
    assert len(whole) == 180 and reader.total_rows == 180
    starts = [k + 1 for k in range(len(data)) if data[k:k + 1] == b"\n" and data[k + 1:k + 4] == b"\xef\xbb\xbf"]
    assert len(starts) == 3
    for at in starts:  # a byte range that starts at each BOM's line (read_block: after the line feed at its offset)
        parts = reader.partitions(blocksize=at - 1)
        assert any(p.offset == at - 1 for p in parts)
        assert rows_by_partitions(reader, parts) == whole, at


def test_a_raw_tab_in_a_jsonl_string_is_named(tmp_path):
    """A tab written as it is inside a JSON string (printf, string joins; JSON requires \\t) was "not JSON (Invalid
    control character at at column 12)" with a hint that the file might be CSV, or a bad row "invalid JSON (Invalid
    control character at: line 1 column 12 (char 11))": the character is named, and where, and what JSON requires."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"text": "a\tb"}\n')
    with pytest.raises(InputError) as e:
        open_input(str(path))
    assert e.value.message == (f"{path} line 1: not JSON: a tab (U+0009) written as it is inside a string at column 12, "
                               "where JSON requires it escaped (\\t), and none of its first 1 line(s) is a JSON object - "
                               "write each line with a JSON writer (json.dumps writes a tab in a string as \\t, as JSON "
                               "requires); a file of tab-separated values is read with input_format='tsv'")
    path.write_bytes(b'{"text": "ok"}\n{"text": "a\x00b"}\n{"text": "x\ry"}\n')
    reader = open_input(str(path))
    whole = rows_of(reader)
    assert [(r, t, why and why.text) for r, t, _, why in whole] == [
        (0, "ok", None),
        (1, None, "invalid JSON: a NUL (U+0000) written as it is inside a string at column 12, where JSON requires it "
                  "escaped (\\u0000)"),
        (2, None, "invalid JSON: a carriage return (U+000D) written as it is inside a string at column 12, where JSON "
                  "requires it escaped (\\r)")]
    assert rows_by_partitions(reader, reader.partitions(blocksize=16)) == whole


@pytest.mark.parametrize("fmt, text", [("csv", "id,text\x851,hello world\x852,good day\x85"),
                                       ("jsonl", '{"id": 1, "text": "hello world"}\x85{"id": 2, "text": "good day"}\x85')])
def test_ebcdic_lines_that_end_in_nl_say_how_to_read_them(tmp_path, fmt, text):
    """EBCDIC lines that end in its NL (0x15, as z/OS writes them) read as one line in cp037 ("cannot read the header
    line as CSV (... Empty CSV file ...)", "not JSON (Extra data ...)"): the line ends are named, with the tr line that
    makes them line feeds (0x25); read so, the rows are there."""
    path = tmp_path / f"in.{fmt}"
    path.write_bytes(text.encode("cp037"))
    for given in ("utf-8", "cp037"):
        with pytest.raises(InputError) as e:
            open_input(str(path), encoding=given)
        assert e.value.message == (f"{path}: its lines end in EBCDIC's NL (byte 0x15), not a line feed (0x25) as "
                                   f"bertfeat reads cp037 lines - make them line feeds (tr '\\025' '\\045' < {path} > "
                                   f"in.lf.{fmt}) and pass that file with encoding='cp037'")
    path.write_bytes(path.read_bytes().replace(b"\x15", b"\x25"))  # what the tr line does
    got = [(r, t if isinstance(t, str) else t.decode()) for r, t, _, _ in rows_of(open_input(str(path), encoding="cp037"))]
    assert got == [(0, "hello world"), (1, "good day")]


AFTER_QUOTE = ("text after a closing quote: the quoted field in column {!r} is followed by more text before "
               "the next delimiter, which CSV does not allow, so the value cannot be read as written (a CSV reader joins "
               "the parts and drops the quotes)")


@pytest.mark.parametrize("max_field", [0, 1 << 20])
def test_text_after_a_closing_quote_is_a_bad_row_at_every_offset(tmp_path, monkeypatch, max_field):
    """A CSV field with text after its closing quote on the same line (`"Stop" he said`, `"007"x`) was joined by
    pyarrow without its quotes: the text encoded as 'Stop he said' and the kept value written as '007x', exit 0. Each
    such row is a bad row (code text-after-quote) naming the column, with no value kept (any of them may be
    joined parts); the rows around keep their numbers and values, at every offset of pyarrow's blocks and of the Dask
    engine's byte ranges, with a field limit or without."""
    monkeypatch.setattr(CsvReader, "CSV_BLOCK_BYTES", 256)
    lines, want = ["id,text,code"], []
    for i in range(300):
        if i % 23 == 4:
            lines.append(f'r{i},"Stop" he said {i},"00{i}"' if i % 2 else f'r{i},said {i},"00{i}"x')
            want.append((None, None, None, AFTER_QUOTE.format("code" if i % 2 == 0 else "text")))
        else:
            lines.append(f'r{i},"sentence, {i}","00{i}"')
            want.append((f"sentence, {i}".encode(), f"r{i}".encode(), f"00{i}", None))
    path = tmp_path / "in.csv"
    path.write_text("\n".join(lines) + "\n")
    reader = open_input(str(path), id_column="id", keep=["code"], keep_as={"code": "str"}, max_field_bytes=max_field)
    got = []
    for b in reader.batches():
        for k, r in enumerate(b.rows):
            reason = b.pre_rejected.get(r)
            got.append((b.texts[k], b.ids[k], b.extra["code"][k], reason and reason.text))
            assert reason is None or (reason.code == RejectCode.TEXT_AFTER_QUOTE and r not in b.written)
    assert got == want
    parts = reader.partitions(blocksize=512, target=64)
    assert len(parts) >= 8
    assert rows_by_partitions(reader, parts) == rows_of(reader)


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl"])
@pytest.mark.parametrize("suffix, compress", [(".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress)])
def test_a_compressed_file_cut_short_past_its_head_says_so(tmp_path, fmt, suffix, compress):
    """A compressed CSV / TSV cut short after the head read to find its columns: pyarrow's CSV reader met the
    truncated stream and it was said as a parse error ("cannot parse as CSV (Truncated compressed stream) - check the
    file format, --input-format and --encoding"); now as a cut short in the head is (and as JSONL always said)."""
    rows = [f"sentence {i} of a file long enough to pass its head, {i * 7919 % 10007}" for i in range(60000)]
    text = ("".join(json.dumps({"text": r}) + "\n" for r in rows) if fmt == "jsonl"
            else "text\n" + "".join(r.replace(",", "") + "\n" for r in rows))
    whole = compress(text.encode())
    src = tmp_path / f"long.{fmt}{suffix}"
    src.write_bytes(whole[: len(whole) * 3 // 4])
    with pytest.raises(InputError) as e:
        for _ in open_input(str(src)).batches():
            pass
    assert re.fullmatch(rf"{re.escape(str(src))}( near row \d+)?: cannot read the file \(.+\)", e.value.what), e.value.what
    assert e.value.fix == "check the file is complete and its compression"


def _utf16_with(rows: list[str], bad_row: int, cut_last: bool = False) -> bytes:
    """A UTF-16 CSV (text, k) whose row ``bad_row`` holds a lone surrogate (00 d8: a byte below 0x80) in its text."""
    body = b"".join(("a" if i != bad_row else "").encode("utf-16-le") + (b"\x00\xd8" if i == bad_row else b"")
                    + f"{r},{i}\n".encode("utf-16-le") for i, r in enumerate(rows))
    data = codecs.BOM_UTF16_LE + "text,k\n".encode("utf-16-le") + body
    return data[:-1] if cut_last else data


@pytest.mark.parametrize("n, bad", [(3, 0), (3000, 2998), (60000, 59990)])
def test_a_utf16_code_unit_the_codec_cannot_read_is_a_bad_row(tmp_path, n, bad):
    """A lone surrogate in a UTF-16 CSV stopped the run even with on_bad_row='skip': in the head as "header line:
    invalid utf-16 at byte 30 - pass --encoding ... latin-1" (the fallback cut the header at a 0x0a byte, half a code
    unit), past the first MiB as "cannot parse as CSV ('utf-16-le' codec can't decode ...)" (surrogateescape cannot
    escape the byte 0x00). Now its row is a bad row, as a byte UTF-8 cannot read is, and JSONL's were."""
    src = tmp_path / "s.csv"
    src.write_bytes(_utf16_with([f"row {i}" for i in range(n)], bad))
    got = rows_of(open_input(str(src), encoding="utf-16", keep=["k"]))
    assert [r for r, _, _, why in got] == list(range(n))
    rejected = [(r, why.code, why.text) for r, _, _, why in got if why is not None]
    assert rejected == [(bad, RejectCode.ENCODING, "invalid utf-16: byte 0x00 at character 0 of the text")]
    assert got[bad][1] == f"\\x00\\xd8row {bad}" and got[-1][1] == f"arow {n - 1}".encode()


def test_a_utf16_file_cut_inside_its_last_code_unit_rejects_its_last_row(tmp_path):
    src = tmp_path / "c.csv"
    src.write_bytes("text,k\nhello,1\nworld,2\n".encode("utf-16")[:-1])
    got = rows_of(open_input(str(src), encoding="utf-16", keep=["k"]))
    assert [(r, why and why.text) for r, _, _, why in got] == [
        (0, None), (1, "invalid utf-16: byte 0x0a at character 1 of the kept column 'k'")]
