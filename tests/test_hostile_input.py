"""Input that looks like a table but is not what it seems (issue 25): duplicate CSV/TSV header names.

Every refusal is one exact `Error: what - fix` line, exit 1, nothing written, the input unchanged.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from extract_util import assert_close, embeddings, no_leftovers, read_table, run, tiny_encoder, tiny_model, write_csv

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
