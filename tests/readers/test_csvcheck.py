"""bertfeat.readers.csvcheck (the quote tracker behind unclosed-quote detection, the delimiter sniffer) and
bertfeat.checks.parse_pca_spec: results independent of how the stream is cut into reads."""

from __future__ import annotations

import io

import pyarrow.csv as pcsv
import pytest

from bertfeat.readers.csvcheck import QuoteTracker, sniff_delimiter
from bertfeat.errors import BertfeatError
from bertfeat.checks import parse_pca_spec

CASES = {
    "clean": (b'id,text\n1,"he said ""hi"""\n2,"a\nb"\n3,5" screen\n4,"x"', False, {}, 1),
    "unclosed at eof": (b"id,text\n1,hello\n2,\"world\n3,more\n4,again\n", True, {}, 1),
    "closed by a later quote": (b'id,text\r\n\r\n0,"a\r\n1,b\r\n2,"c"\r\n3,d\r\n', False, {0: (3, 1, 5)}, 1),
    "escaped quote at a read boundary": (b'text\n"a""\nb"\n', False, {}, 1),
    # lines end at \r alone too (pyarrow's reading): the lines are numbered so, whatever the reads
    "closed by a later quote, \\r line ends": (b'id,text\r\r0,"a\r1,b\r2,"c"\r3,d\r', False, {0: (3, 1, 5)}, 0),
    "closed by a later quote, mixed line ends": (b'id,text\n\r\n0,"a\r1,b\r\n2,"c"\n3,d\r', False, {0: (3, 1, 5)}, 1),
    # runs of CRs outside quotes are blank lines, each counted (skipped as one run, whatever the reads)
    "runs of CRs": (b'id,text\r\r\r0,"a\r\r1,b\r2,"c"\r\r\r\r\n3,d\r\r', False, {0: (4, 1, 7)}, 0),
    # text after a closing quote on its own line (pyarrow would join the parts): a suspect that closes where it opens;
    # a quote closed before the delimiter, a line end or the end of the file, and a quote inside a value, are CSV
    "text after a closing quote": (b'id,text\n0,"Stop" he said\n1,"c" \n2,"d",x\n3,5" "e"\n4,"a""b"\n5,"f"""g\n6,"h"',
                                   False, {0: (2, 1, 2), 1: (3, 1, 3), 5: (7, 1, 7)}, 0),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("read", [1, 2, 3, 7, 1 << 16])
def test_tracker_does_not_depend_on_read_sizes(name, read):
    data, unclosed, suspects, multiline = CASES[name]
    t = QuoteTracker(io.BytesIO(data))
    r = io.BufferedReader(t, buffer_size=read)
    assert r.read() == data  # the stream passes through unchanged
    assert (t.unclosed, t.suspects, t.multiline_records) == (unclosed, suspects, multiline)


def test_tracker_counts_records_as_pyarrow_does():
    data = b'id,text\r\n\r\n0,"a\nb"\n\n1,c\r2,d\n'
    t = QuoteTracker(io.BytesIO(data))
    io.BufferedReader(t).read()
    rows = pcsv.read_csv(io.BytesIO(data), parse_options=pcsv.ParseOptions(newlines_in_values=True)).num_rows
    assert t.record - 1 == rows == 3


# ------------------------------------------------------------------------------------------ a CR alone inside a line
class _Reads(io.RawIOBase):
    """``data`` handed on at most ``size`` bytes a read (a BufferedReader's read() asks its raw for 8 KiB at a time,
    whatever its buffer size)."""

    def __init__(self, data: bytes, size: int):
        self._data, self._size = io.BytesIO(data), size

    def readable(self):
        return True

    def readinto(self, b):
        return self._data.readinto(memoryview(b)[:self._size])


# data, delimiter, quoting -> {data row: (field of the line's first CR alone, the line as shown, the line's first part)}
CR_CASES = {
    "a CR alone in a value": (b"id,text\n1,a\rb\n2,c\n", ",", True,
                              {0: (1, '"1,a\\rb"', True), 1: (1, '"1,a\\rb"', False)}),
    "CRLF lines, TSV": (b"id\ttext\r\n1\ta\rb\r\n2\tc\r\n", "\t", False,
                        {0: (1, '"1\\ta\\rb"', True), 1: (1, '"1\\ta\\rb"', False)}),
    "CRs first, last and twice": (b"text\n\ra\rb\r\r\nc\nd\r\r\n", "\t", False,
                                  {0: (0, '"\\ra\\rb\\r"', True), 1: (0, '"\\ra\\rb\\r"', False)}),
    # a line whose CRs leave one record (the other pieces blank lines pyarrow skips) is not cut
    "rows ending \\r\\r\\n, a LF header": (b"id\ttext\n1\thello\r\r\n2\tworld\r\r\n", "\t", False, {}),
    "rows ending \\r\\r\\n, a CRLF header": (b"id,text\r\n1,hello\r\r\n2,world\r\r\r\n", ",", True, {}),
    "a CR at the start of a line": (b"id\ttext\n\r1\thello\n\r\r2\tw\r\r\n", "\t", False, {}),
    "CRs then the end of the file": (b"text\na" + b"\r" * 9, "\t", False, {}),
    "a CR at a line's start, one inside": (b"text\n\rhello\rworld\n", "\t", False,
                                           {0: (0, '"\\rhello\\rworld"', True), 1: (0, '"\\rhello\\rworld"', False)}),
    "CRs between two values": (b"text\na" + b"\r" * 9 + b"b\nc\n", "\t", False,
                               {0: (0, '"a' + "\\r" * 9 + 'b"', True), 1: (0, '"a' + "\\r" * 9 + 'b"', False)}),
    "a long line": (b"text\n" + b"x" * 150 + b"\r" + "é".encode() * 100 + b"\n", ",", True,
                    {0: (0, '"...' + "x" * 20 + "\\r" + "é" * 20 + '..."', True),
                     1: (0, '"...' + "x" * 20 + "\\r" + "é" * 20 + '..."', False)}),
    "old Mac line ends": (b"id,text\r1,a\r2,b\r", ",", True, {}),
    "a CR in quotes": (b'id,text\n1,"a\rb"\r\n2,"c\r\nd"\n', ",", True, {}),
    "CRLF lines only": (b"id,text\r\n1,a\r\n\r\n2,b\r\n", ",", True, {}),
}


@pytest.mark.parametrize("name", list(CR_CASES))
@pytest.mark.parametrize("read", [1, 2, 3, 7, 1 << 16])
def test_the_parts_of_a_line_a_cr_alone_cuts_are_named_whatever_the_reads(name, read):
    """In a file whose header line ends in a line feed, every record of a line holding a CR alone (not a CRLF's) outside
    quotes is named, with the field of the line's first such CR and the line around it: the same for any read sizes
    (a CR, a CRLF's two bytes or the line around them split between reads). Old Mac line ends (the header's a CR alone)
    and CRs in quotes are line ends and values as before. The records named are pyarrow's."""
    data, delimiter, quoting, want = CR_CASES[name]
    t = QuoteTracker(_Reads(data, read), delimiter, quoting=quoting)
    assert io.BufferedReader(t).read() == data
    assert {row: (line.field, line.shown(), first) for row, (line, first) in t.cut_rows.items()} == want
    skipped = []  # pyarrow's records with another number of fields are records too (bad rows)
    rows = pcsv.read_csv(io.BytesIO(data), parse_options=pcsv.ParseOptions(
        delimiter=delimiter, quote_char='"' if quoting else False, newlines_in_values=quoting,
        invalid_row_handler=lambda row: skipped.append(row) or "skip")).num_rows
    assert t.record - 1 == rows + len(skipped) and all(r < t.record - 1 for r in want)


# ------------------------------------------------------------------------------------------ fields over max_field (issue 44)
def _field(rng, delimiter: str, quoting: bool) -> bytes:
    """A field as written: sometimes long, with delimiters, quotes and line breaks inside quotes (CSV)."""
    alphabet = "ab é中" + (delimiter + '"\n\r' if quoting else "")
    text = "".join(rng.choice(list(alphabet)) for _ in range(int(rng.integers(0, 3) == 0) * int(rng.integers(0, 60))))
    if quoting and (any(c in text for c in delimiter + '"\n\r') or rng.random() < 0.3):
        return ('"' + text.replace('"', '""') + '"').encode()
    return text.encode()


@pytest.mark.parametrize("seed", range(40))
def test_fields_over_the_cap_reach_pyarrow_empty_whatever_the_reads(seed):
    """Random CSV / TSV: every data field whose value is larger than max_field (its UTF-8 bytes as read: a quoted
    field's quotes and one of each '""' not counted, as JSONL counts a value) arrives as "", its row and value size
    noted; every other byte passes unchanged, the header whole; the offsets map back onto the input."""
    import csv
    import numpy as np

    rng = np.random.default_rng(seed)
    quoting = seed % 4 != 0
    delimiter = "," if quoting else "\t"
    cap = int(rng.integers(1, 40))
    rows = [[_field(rng, delimiter, quoting) for _ in range(3)] for _ in range(int(rng.integers(1, 30)))]
    header = [b"a" * 50, b"b", b"c"]  # a header name over the cap is never cut
    newline = b"\r\n" if rng.random() < 0.3 else b"\n"
    data = newline.join(delimiter.encode().join(r) for r in [header, *rows]) + newline
    t = QuoteTracker(io.BytesIO(data), delimiter, cap, quoting=quoting)
    out = io.BufferedReader(t, buffer_size=int(rng.choice([1, 2, 3, 7, 100, 1 << 16]))).read()

    def parsed(raw: bytes) -> list[list[str]]:
        return list(csv.reader(io.StringIO(raw.decode(), newline=""), delimiter=delimiter,
                               quoting=csv.QUOTE_MINIMAL if quoting else csv.QUOTE_NONE))

    values = [[len(v.encode()) for v in p] for p in parsed(data)[1:]]
    assert all(v <= len(f) for r, p in zip(rows, values) for f, v in zip(r, p))
    want = [[f.decode() for f in header]] + [
        [('""' if not quoting else "") if v > cap else row for v, row in zip(s, p)]
        for s, p in zip(values, parsed(data)[1:])]
    assert parsed(out) == want
    assert t.oversized == {k: [(j, v) for j, v in enumerate(s) if v > cap]
                           for k, s in enumerate(values) if any(v > cap for v in s)}
    assert t.file_offset(len(out)) == len(data)
    if not t.oversized:
        assert out == data


def test_a_field_over_the_cap_never_reaches_pyarrow_whole():
    """48 MB in one quoted field (line breaks and quotes in it) and 5 MB left unclosed at the end: nothing of them is
    handed on (an empty quoted field; the unclosed one its opening quote, so pyarrow still reads it to the end), and
    the rows around them are read as they are."""
    big = b'"' + b'word ""quoted""\n' * 3_000_000 + b'"'
    data = b"id,text\n1,first\n2," + big + b"\n3,third\n4,\"" + b"open " * 1_000_000
    t = QuoteTracker(io.BytesIO(data), ",", 1 << 16)
    out = io.BufferedReader(t, buffer_size=1 << 20).read()
    assert out == b'id,text\n1,first\n2,""\n3,third\n4,"'
    assert t.oversized == {1: [(1, len(big) - 2 - 6_000_000)], 3: [(1, 5_000_000)]} and t.unclosed
    rows = pcsv.read_csv(io.BytesIO(out), parse_options=pcsv.ParseOptions(newlines_in_values=True))
    assert rows.column("id").to_pylist() == [1, 2, 3, 4]


@pytest.mark.parametrize("head, expected", [(b"id,text\n", ","), (b"id;text\n", ";"), (b"id|text\n", "|"),
                                            (b"id\ttext\n", "\t"), (b'"a;b",c\n', ","), (b"text\n", ","),
                                            (b"a\r\tb\n", ","), (b"\xef\xbb\xbfid;text\r\n", ";")])
def test_sniff_delimiter(head, expected):
    assert sniff_delimiter(head) == expected


@pytest.mark.parametrize("text, expected", [("100", 100), ("0.95", 0.95), ("1.0", None), ("all", None), ("ALL", None),
                                            (" 7 ", 7), ("32.0", 32), ("1", 1)])
def test_parse_pca_spec(text, expected):
    assert parse_pca_spec(text) == expected


@pytest.mark.parametrize("text", ["0", "0.0", "-1", "-0.5", "1.5", "nan", "inf", "lots", ""])
def test_parse_pca_spec_refuses(text):
    with pytest.raises(BertfeatError):
        parse_pca_spec(text)


def test_option_values_name_the_parameter_in_python_and_the_flag_on_the_cli(tmp_path, capsys):
    """parse_pca_spec names the parameter it is given (pca of extract, n_components of a PCA fit); the CLI
    shows each as its flag, the value as typed (quoted when it is not a number)."""
    from bertfeat.cli.app import main
    from bertfeat.readers.csvcheck import parse_delimiter

    fix = "give a whole number of components (e.g. 100), a variance fraction in (0, 1) (e.g. 0.95), mle (Minka's choice), or 1.0 / all for every component"
    for text, param, python, cli in (("lots", "pca", "pca='lots' is not a number", "--pca 'lots' is not a number"),
                                     ("0", "n_components", "n_components=0 is out of range", "--n-components 0 is out of range"),
                                     ("1e-9x", "pca", "pca='1e-9x' is not a number", "--pca '1e-9x' is not a number"),
                                     ("nan", "pca", "pca=nan is out of range", "--pca nan is out of range"),
                                     ("2.5", "n_components", "n_components=2.5: a number of components must be whole",
                                      "--n-components 2.5: a number of components must be whole")):
        with pytest.raises(BertfeatError) as e:
            parse_pca_spec(text, param)
        assert (e.value.message, e.value.render({})) == (f"{python} - {fix}", f"{cli} - {fix}")
    with pytest.raises(BertfeatError) as e:
        parse_delimiter("ab")
    assert e.value.message == "delimiter='ab' is not a single delimiter character - give one character, e.g. ';', '|' or tab"
    src = tmp_path / "c.csv"
    src.write_text("text\na\n")
    assert main(["extract", str(src), "-o", str(tmp_path / "o.parquet"), "--delimiter", "ab", "-q"]) == 1
    assert capsys.readouterr().err == "Error: --delimiter 'ab' is not a single delimiter character - give one character, e.g. ';', '|' or tab\n"
    # a character outside ASCII was taken, then pyarrow refused it as a header that is not CSV ("check --input-format
    # and --encoding"): refused up front, saying why and how to convert the file
    fix = ("convert the file's delimiter to an ASCII one first (e.g. sed 's/é/|/g' in.csv > out.csv, if no value holds "
           "'|'), or write the rows as JSONL or Parquet")
    with pytest.raises(BertfeatError) as e:
        parse_delimiter("é")
    assert e.value.message == f"delimiter='é' is not an ASCII character, and CSV / TSV are split on one byte - {fix}"
    src.write_text("textéid\naéb\n")
    assert main(["extract", str(src), "-o", str(tmp_path / "o.parquet"), "--delimiter", "é", "-q"]) == 1
    assert capsys.readouterr().err == (f"Error: --delimiter 'é' is not an ASCII character, and CSV / TSV are split on "
                                       f"one byte - {fix}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv"]


@pytest.mark.parametrize("given, shown, python", [
    ("\\t", "'\\t' (tab)", "'\\\\t'"),  # backslash t, as a shell passes '\t': a tab (pandas' sep='\t')
    ("tab", "tab", "'tab'"),
    (";", "';'", "';'"),
])
def test_a_delimiter_the_header_line_lacks_is_refused(tmp_path, capsys, given, shown, python):
    """--delimiter '\\t' (or tab, or ';') on a comma file read each line whole as one column 'id,text', auto-detected as
    the text column, rc 0: the ids were encoded with the texts."""
    from bertfeat import extract
    from bertfeat.cli.app import main
    from extract_util import tiny_model

    src, out = tmp_path / "c.csv", tmp_path / "o.parquet"
    src.write_text("id,text\n1,hello world\n2,good day\n", encoding="utf-8")
    fix = "pass --delimiter ',' (or leave --delimiter out: the header line decides)"
    assert main(["extract", str(src), "-o", str(out), "-m", str(tiny_model()), "--delimiter", given, "-q"]) == 1
    assert capsys.readouterr().err == (f"Error: {src}: --delimiter {shown} is not in the header line 'id,text', which "
                                       f"',' separates into 2 columns - {fix}\n")
    with pytest.raises(BertfeatError) as e:
        extract(src, model=tiny_model(), output=out, delimiter=given)
    assert e.value.message == (f"{src}: delimiter={python} is not in the header line 'id,text', which ',' separates "
                               "into 2 columns - pass delimiter=\"','\" (or leave delimiter out: the header line decides)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv"]


def test_backslash_t_is_a_tab(tmp_path, capsys):
    """'\\t' as typed in a shell reads a tab-separated file as --delimiter tab does."""
    import pyarrow.parquet as pq

    from bertfeat.cli.app import main
    from extract_util import tiny_model

    src = tmp_path / "t.csv"
    src.write_text("id\ttext\n1\thello, world\n", encoding="utf-8")
    for given, out in (("\\t", tmp_path / "a.parquet"), ("tab", tmp_path / "b.parquet")):
        assert main(["extract", str(src), "-o", str(out), "-m", str(tiny_model()), "--delimiter", given,
                     "--id-column", "id", "-q"]) == 0, capsys.readouterr().err
    a, b = pq.read_table(tmp_path / "a.parquet"), pq.read_table(tmp_path / "b.parquet")
    assert a.column("id").to_pylist() == ["1"] and a.column("embedding").equals(b.column("embedding"))


@pytest.mark.parametrize("read", [3, 7, 1 << 16])
def test_rows_of_the_header_lines_length_are_compared_only_where_its_bytes_are(read, monkeypatch):
    """Every record as long as the header line (a file of short fixed-width rows) was compared with it by a Python call,
    which made the tracker about 40 to 60% slower on such a file; now a read compares only when the header's bytes are
    in it (or across its start). The records that are the header line again are the same, whatever the reads."""
    data = (b"aa,bb\r\n" + b"12,cd\n" * 2000 + b"\xef\xbb\xbfaa,bb\r\n" + b"12,cd\n" * 2000 + b"aa,bb\n"
            + b"12,cd\n" * 500 + b"x,aa,bb\n")
    calls = []
    same = QuoteTracker._same_as_header
    monkeypatch.setattr(QuoteTracker, "_same_as_header", lambda self, *a: calls.append(a[-1]) or same(self, *a))
    t = QuoteTracker(_Reads(data, read))
    assert io.BufferedReader(t).read() == data
    assert t.header == b"aa,bb" and sorted(t.header_rows) == [2000, 4001]
    if read == 1 << 16:  # (one read holds all: every record compared, then as now none but where the header is)
        return
    assert len(calls) < 600, len(calls)  # the header, its repeats, and the rows of the reads around them
