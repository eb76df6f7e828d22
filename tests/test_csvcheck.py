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


def test_option_values_name_the_parameter_in_python_and_the_flag_on_the_cli(tmp_path, capsys):
    """parse_pca_spec names the parameter it is given (pca of extract, n_components of a PCA fit); the CLI
    shows each as its flag, the value as typed (quoted when it is not a number)."""
    from bertfeat.cli import main
    from bertfeat.csvcheck import parse_delimiter

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
