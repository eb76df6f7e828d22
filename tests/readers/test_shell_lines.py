"""The shell lines bertfeat's messages suggest are pasteable as printed: a path holding a space, a quote or a ``$``
stays one word (``shlex.quote``), a glob's wildcards stay bare so the shell still expands them. Each line is taken
from the message and run with ``bash -c``, and what it made is read back.

Before: ``awk 'NR == 1 || FNR > 1' /tmp/my data/*.csv > all.csv`` (two words, neither a file), ``tr ... < it's.jsonl``
(an unclosed quote), ``cat a b | bertfeat extract -``."""

from __future__ import annotations

import glob
import gzip
import os
import re
import shlex
import subprocess

import pytest

from bertfeat.errors import InputError
from bertfeat.readers import open_input

NAMES = ["my data", "it's", "a $HOME b", "run [1]"]


def _bash(line: str, cwd) -> None:
    subprocess.run(["bash", "-c", line], cwd=cwd, check=True, capture_output=True)


def _message(path) -> str:
    with pytest.raises(InputError) as e:
        open_input(str(path))
    return e.value.message


@pytest.mark.parametrize("folder", NAMES)
@pytest.mark.parametrize("as_glob", [False, True])
def test_the_join_line_of_csv_files_runs_as_printed(tmp_path, folder, as_glob):
    d = tmp_path / folder
    d.mkdir()
    (d / "a b.csv").write_text("text\nfirst\n")
    (d / "c.csv").write_text("text\nsecond\n")
    msg = _message(glob.escape(str(d)) + "/*.csv" if as_glob else d)
    line = re.search(r"(awk 'NR == 1 \|\| FNR > 1' .*? > all\.csv)", msg)
    assert line, msg
    line = line[1]
    assert shlex.quote(str(d)) in line or shlex.quote(str(d) + "/") in line, line
    _bash(line, tmp_path)
    assert (tmp_path / "all.csv").read_text() == "text\nfirst\nsecond\n"


@pytest.mark.parametrize("folder", NAMES)
def test_the_decompress_then_join_line_runs_as_printed(tmp_path, folder):
    d = tmp_path / folder
    d.mkdir()
    for name, text in (("a b.csv.gz", "first"), ("c.csv.gz", "second")):
        (d / name).write_bytes(gzip.compress(f"text\n{text}\n".encode()))
    msg = _message(d)
    m = re.search(r"e\.g\. (gunzip -k .*?), then (awk .*? > all\.csv)", msg)
    for line in m.groups():
        _bash(line, tmp_path)
    assert (tmp_path / "all.csv").read_text() == "text\nfirst\nsecond\n"


@pytest.mark.parametrize("name", ["x y.jsonl", "it's.json"])
def test_the_jq_and_tr_lines_of_a_jsonl_file_run_as_printed(tmp_path, name):
    src = tmp_path / name
    src.write_text('[\n{"text": "a"},\n{"text": "b"}\n]\n')
    line = re.search(r"e\.g\. (jq -c .*)$", _message(src))[1]
    _bash(line, tmp_path)
    made = [p for p in tmp_path.iterdir() if p != src]
    assert len(made) == 1 and made[0].read_text() == '{"text":"a"}\n{"text":"b"}\n'
    made[0].unlink()
    src.write_bytes(b'{"text": "a"}\r{"text": "b"}\r{"text": "c"}\r')
    line = re.search(r"e\.g\. (tr .*)$", _message(src))[1]
    _bash(line, tmp_path)
    made = [p for p in tmp_path.iterdir() if p != src]
    assert len(made) == 1 and made[0].read_bytes() == b'{"text": "a"}\n{"text": "b"}\n{"text": "c"}\n'


def test_the_jq_line_never_writes_over_its_own_input(tmp_path):
    """``jq -c '.[]' x.jsonl > x.jsonl``: the shell empties x.jsonl before jq reads it."""
    src = tmp_path / "x.jsonl"
    src.write_text('[\n{"text": "a"}\n]\n')
    line = re.search(r"e\.g\. (jq -c .*)$", _message(src))[1]
    assert line.endswith("> x.lines.jsonl"), line


@pytest.mark.parametrize("name", ["a b.csv", "it's.csv"])
def test_the_cat_line_of_a_named_pipe_quotes_it(tmp_path, name):
    fifo = tmp_path / name
    os.mkfifo(fifo)
    line = re.search(r"e\.g\. (cat .*?) \| bertfeat extract -", _message(fifo))[1]
    assert shlex.split(line) == ["cat", str(fifo)]


@pytest.mark.parametrize("pattern, shown", [("data/*.csv", "data/*.csv"), ("my data/*.csv", "'my data/'*.csv"),
                                            ("d[[]1]/x?.csv", "'d[1]/x'?.csv"), ("-x/*.csv", "./-x/*.csv"),
                                            ("a$b/[!ab]*.csv", "'a$b/'[!ab]*.csv")])
def test_shell_pattern_quotes_the_letters_and_leaves_the_wildcards(pattern, shown):
    from bertfeat.readers.paths import shell_pattern

    assert shell_pattern(pattern) == shown


@pytest.mark.parametrize("fmt, text", [("csv", "id,text\x851,hello world\x852,good day\x85"),
                                       ("jsonl", '{"id": 1, "text": "hello world"}\x85{"id": 2, "text": "good day"}\x85')])
@pytest.mark.parametrize("name", ["in.lf", "it's.lf", "in"])
@pytest.mark.parametrize("gz", [False, True])
def test_the_tr_line_of_ebcdic_nl_lines_runs_as_printed_and_never_over_its_input(tmp_path, fmt, text, name, gz):
    """The EBCDIC line's target was the input's name up to its first dot + .lf.FMT: for in.lf.csv, in.lf.csv itself,
    which `tr ... < in.lf.csv > in.lf.csv` emptied before tr read it; and tr read a .gz file's compressed bytes."""
    data = text.encode("cp037")
    src = tmp_path / (f"{name}.{fmt}" + (".gz" if gz else ""))
    src.write_bytes(gzip.compress(data) if gz else data)
    before = src.read_bytes()
    with pytest.raises(InputError) as e:
        open_input(str(src), encoding="cp037")
    line = re.search(r"make them line feeds \((.*)\) and pass that file", e.value.message)[1]
    _bash(line, tmp_path)
    assert src.read_bytes() == before
    made = [p for p in tmp_path.iterdir() if p != src]
    assert [p.name for p in made] == [f"{name}.lf.{fmt}"], line
    assert made[0].read_bytes() == data.replace(b"\x15", b"\x25")
    assert len(list(open_input(str(made[0]), encoding="cp037").batches())) >= 1  # read so, the rows are there


@pytest.mark.parametrize("name", ["x.lf.jsonl", "x.jsonl.gz"])
def test_the_tr_line_of_cr_jsonl_lines_never_writes_over_its_input_and_reads_a_gz_file(tmp_path, name):
    data = b'{"text": "a"}\r{"text": "b"}\r{"text": "c"}\r'
    src = tmp_path / name
    src.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    before = src.read_bytes()
    line = re.search(r"e\.g\. (.*tr .*)$", _message(src))[1]
    _bash(line, tmp_path)
    assert src.read_bytes() == before
    made = [p for p in tmp_path.iterdir() if p != src]
    assert len(made) == 1 and made[0].read_bytes() == data.replace(b"\r", b"\n"), line
