"""bertfeat.readers (open_input and the per-format readers): formats, column choice, and streaming that keeps every row in its place.

The streaming tests use tiny pyarrow blocks (a few hundred bytes) so that a small file crosses
many block boundaries, with malformed lines before, on and after them.
"""

from __future__ import annotations

import bz2
import gzip
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bertfeat.errors import InputError
from bertfeat.rejects import Reason, RejectCode
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


@pytest.mark.parametrize("name, fmt", [("a.csv", "csv"), ("a.TSV", "tsv"), ("a.tab", "tsv"), ("a.parquet", "parquet"),
                                       ("a.pq", "parquet"), ("a.jsonl", "jsonl"), ("a.ndjson", "jsonl"),
                                       ("a.csv.gz", "csv"), ("a.jsonl.zst", "jsonl"), ("a.tsv.bz2", "tsv")])
def test_detect_format(name, fmt):
    assert detect_format(name, None) == fmt
    assert detect_format(name, "jsonl") == "jsonl"


def test_detect_format_errors():
    with pytest.raises(InputError, match=r"^a\.txt: cannot tell the format from the extension - add input_format='csv\|tsv\|parquet\|jsonl'$") as e:
        detect_format("a.txt", None)
    assert e.value.render({}) == "a.txt: cannot tell the format from the extension - add --input-format csv|tsv|parquet|jsonl"
    with pytest.raises(InputError, match=r"^unknown input format 'xml' - choose one of csv, tsv, parquet, jsonl$"):
        detect_format("a.csv", "xml")


@pytest.mark.parametrize("header, picked", [
    (["id", "Review", "sentence"], "sentence"),  # text > sentence > content > review, any case
    (["id", "CONTENT", "review"], "CONTENT"),
    (["id", "Text", "sentence"], "Text"),
    (["body"], "body"),  # the only column
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


def test_csv_blank_lines_are_not_rows(tmp_path):
    (tmp_path / "a.csv").write_bytes(b"\n\ntext\r\none\r\n\r\ntwo\r\nthree")
    assert [(r, t) for r, t, _, _ in rows_of(open_input(str(tmp_path / "a.csv")))] == [(0, b"one"), (1, b"two"), (2, b"three")]


def test_csv_bom_and_cr_line_ends(tmp_path):
    (tmp_path / "a.csv").write_bytes(b"\xef\xbb\xbfid,text\r1,a\r2,b\r")
    src = open_input(str(tmp_path / "a.csv"), id_column="id")
    assert src.columns == ["id", "text"]
    assert [(r, t, i) for r, t, i, _ in rows_of(src)] == [(0, b"a", b"1"), (1, b"b", b"2")]


@pytest.mark.parametrize("ext, compress", [(".gz", gzip.compress), (".bz2", bz2.compress)])
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
    import pickle

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
    worker = pickle.loads(pickle.dumps(reader))
    first, got = 0, []
    for p in parts:
        assert worker.count_rows(p) == len(worker.read_partition(p, 0).rows)
        b = worker.read_partition(p, first)
        got += rows_in([b])
        first += len(b.rows)
    assert got == whole


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
