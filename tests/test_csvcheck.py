"""bertfeat.csvcheck (the quote tracker behind unclosed-quote detection, the delimiter sniffer) and
bertfeat.specs.parse_pca_spec: results independent of how the stream is cut into reads."""

from __future__ import annotations

import io

import pyarrow.csv as pcsv
import pytest

from bertfeat.csvcheck import QuoteTracker, sniff_delimiter
from bertfeat.errors import BertfeatError
from bertfeat.specs import parse_pca_spec

CASES = {
    "clean": (b'id,text\n1,"he said ""hi"""\n2,"a\nb"\n3,5" screen\n4,"x"', False, {}, 1),
    "unclosed at eof": (b"id,text\n1,hello\n2,\"world\n3,more\n4,again\n", True, {}, 1),
    "closed by a later quote": (b'id,text\r\n\r\n0,"a\r\n1,b\r\n2,"c"\r\n3,d\r\n', False, {0: (3, 1, 5)}, 1),
    "escaped quote at a read boundary": (b'text\n"a""\nb"\n', False, {}, 1),
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
