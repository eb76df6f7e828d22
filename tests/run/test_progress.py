"""Progress on stderr: a rich bar in a terminal, plain log lines otherwise, nothing with --quiet; the closing summary."""

from __future__ import annotations

import io
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console

import bertfeat
import bertfeat.cli.app as cli
from bertfeat.run.progress import LogProgress, RichProgress, make_progress
from extract_util import run, summary_line, tiny_model, write_csv

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def terminal(monkeypatch):
    """stderr as a 140-column terminal, captured."""
    buf = io.StringIO()
    monkeypatch.setattr(cli, "err_console", Console(file=buf, force_terminal=True, width=140, color_system=None))
    return buf


def _corpus(tmp_path, n=12):
    return write_csv(tmp_path / "c.csv", ["text"], [[f"sentence number {i}"] for i in range(n)])


def test_rich_bar_in_a_terminal(tmp_path, capsys, terminal):
    src = _corpus(tmp_path)
    rc, _, _ = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--chunk-rows", 3)
    assert rc == 0
    text = ANSI.sub("", terminal.getvalue())
    frames = [f for f in re.split(r"[\r\n]", text) if f.startswith("extract")]
    last = " ".join(frames[-1].split())
    assert re.fullmatch(r"extract ━+ 100% 12 rows [\d,]+ rows/s [\d,]+ tokens/s \d+:\d\d:\d\d eta \d+:\d\d:\d\d", last), last
    assert "\x1b[?25l" in terminal.getvalue()  # a live display (cursor hidden while it runs), not log lines
    assert "bertfeat extract:" not in text
    after = text[text.index(frames[-1]) + len(frames[-1]):]
    assert [line.split()[0:2] for line in after.strip().splitlines()][:5] == [["rows", "read"], ["rows", "written"], ["rows", "encoded"],
                                                                           ["rows", "reused"], ["rows", "rejected"]]
    assert summary_line(after, "rows read") == "rows read 12"


def test_rich_bar_counts_parquet_rows(tmp_path, capsys, terminal):
    pq.write_table(pa.table({"text": [f"s {i}" for i in range(10)]}), tmp_path / "d.parquet", row_group_size=3)
    rc, _, _ = run(capsys, "extract", tmp_path / "d.parquet", "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--chunk-rows", 4)
    assert rc == 0
    text = ANSI.sub("", terminal.getvalue())
    percents = [int(m) for m in re.findall(r"(\d+)% \d+ rows", text)]
    assert percents[0] == 0 and percents[-1] == 100
    assert re.findall(r"\d+% (\d+) rows", text)[-1] == "10"


def test_plain_log_lines_when_not_a_terminal(tmp_path, capsys):
    src = _corpus(tmp_path)
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--chunk-rows", 3)
    assert rc == 0
    lines = err.splitlines()
    # a local CSV's rows are counted up front (newlines), so progress is by rows, not bytes
    assert lines[0] == "bertfeat extract: started (12 rows)"
    assert re.fullmatch(r"bertfeat extract: 12 rows \(100\.0%\), [\d,]+ rows/s, [\d,]+ tokens/s, \d+s elapsed", lines[1]), lines[1]
    assert lines[2].startswith("rows read ")
    assert "\x1b" not in err and "━" not in err


class Recorder:
    """A progress sink that keeps what the engine reported: rows and tokens advanced."""

    def __init__(self):
        self.rows = self.tokens = 0

    def start(self, total_rows, total_bytes): ...
    def note(self, message): ...
    def parts(self, done, in_flight, total): ...
    def stop(self): ...

    def advance(self, rows, tokens, bytes_read):
        self.rows += rows
        self.tokens += tokens


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_progress_counts_the_tokens_of_the_rows_it_counts(tmp_path, engine):
    """The progress's rows and tokens are of the same rows, reused ones too, on both engines: a re-run that finds
    every row in the cache advanced its rows with 0 tokens on the local engine (the line said "805 rows/s, 0
    tokens/s"), the Dask engine with the rows' tokens."""
    import bertfeat

    if engine == "dask":
        pytest.importorskip("distributed")
    kw = dict(model=str(tiny_model()), cache=tmp_path / "cache", chunk_rows=4, overwrite=True)
    if engine == "dask":
        kw.update(engine="dask", workers=1, blocksize=64)
    src = write_csv(tmp_path / "c.csv", ["text"], [[f"sentence number {i % 5}"] for i in range(12)])
    out = tmp_path / ("o.parquet" if engine == "local" else "o_dask")
    for encoded in (5, 0):  # a first run (7 duplicates), then every row from the cache
        rec = Recorder()
        s = bertfeat.extract(src, out, progress=rec, **kw)
        assert (s.rows_encoded, s.rows_reused) == (encoded, 12 - encoded)
        assert (rec.rows, rec.tokens) == (12, s.tokens) and s.tokens > 12


def test_periodic_log_lines():
    buf = io.StringIO()
    p = LogProgress(Console(file=buf, width=200), every=0.0)
    p.start(total_rows=30, total_bytes=None)
    for _ in range(3):
        p.advance(10, 100, 0)
    p.stop()
    p.stop()  # idempotent
    lines = buf.getvalue().splitlines()
    assert lines[0] == "bertfeat extract: started (30 rows)"
    assert [re.sub(r", [\d,]+ rows/s, [\d,]+ tokens/s, \d+s elapsed$", "", x) for x in lines[1:]] == [
        "bertfeat extract: 10 rows (33.3%)", "bertfeat extract: 20 rows (66.7%)", "bertfeat extract: 30 rows (100.0%)"]
    # the closing line is not repeated when nothing moved since the last periodic line


def test_dask_parts_in_the_lines_and_the_bar():
    """The Dask engine's parts(done, in_flight, total): in each log line after it, and in the bar's label."""
    buf = io.StringIO()
    p = LogProgress(Console(file=buf, width=200), every=0.0)
    p.start(total_rows=20, total_bytes=None)
    p.parts(0, 2, 4)
    p.advance(10, 100, 0)
    p.parts(1, 2, 4)
    p.advance(10, 100, 0)
    lines = buf.getvalue().splitlines()
    assert re.fullmatch(r"bertfeat extract: 10 rows \(50\.0%\), .*elapsed, 0/4 parts done, 2 in flight", lines[1]), lines[1]
    assert lines[2].endswith("elapsed, 1/4 parts done, 2 in flight"), lines[2]
    bar = RichProgress(Console(file=io.StringIO(), force_terminal=True), "extract")
    bar.start(total_rows=20, total_bytes=None)
    bar.parts(3, 1, 4)
    assert bar._p.tasks[0].description == "extract 3/4 parts done, 1 in flight"
    bar.stop()


def test_quiet_prints_nothing(tmp_path, capsys, terminal):
    src = _corpus(tmp_path)
    rc, out, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "-q")
    assert (rc, out, err, terminal.getvalue()) == (0, "", "", "")
    assert pq.read_table(tmp_path / "o.parquet").num_rows == 12


def test_quiet_none_is_extracts_default_quiet(tmp_path, capsys):
    """bertfeat.extract(quiet=None) showed the progress lines, the opposite of its default quiet=True: None is a
    switch's default in every option of extract, and quiet's is True."""
    src = _corpus(tmp_path)
    bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), quiet=None, cache=False)
    assert capsys.readouterr() == ("", "")
    bertfeat.extract(src, tmp_path / "p.parquet", model=tiny_model(), quiet=False, cache=False)
    assert "bertfeat extract: " in capsys.readouterr().err  # (the line the bug showed)


def test_make_progress_choice():
    assert isinstance(make_progress(Console(file=io.StringIO(), force_terminal=True), False), RichProgress)
    assert isinstance(make_progress(Console(file=io.StringIO()), False), LogProgress)
    assert type(make_progress(Console(file=io.StringIO(), force_terminal=True), True)).__name__ == "NullProgress"


def test_summary_lines(tmp_path, capsys):
    src = tmp_path / "c.csv"
    src.write_text("id,text\na,one two three\nb,\nc,four\n")
    out = tmp_path / "o.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--id-column", "id", "--on-bad-row", "skip")
    assert rc == 0
    summary = [" ".join(x.split()) for x in err.splitlines() if not x.startswith("bertfeat extract:")]
    assert summary[:8] == ["rows read 3", "rows written 2", "rows encoded 2", "rows reused 0", "rows rejected 1",
                           "rows truncated 0 (0 tokens dropped, 0.00% of tokens)", "rows chunked 0", "tokens 8"]
    assert re.fullmatch(r"elapsed [\d.]+ s", summary[8])
    assert re.fullmatch(r"throughput [\d,.]+ rows/s, [\d,]+ tokens/s \(of the rows encoded; reused rows not counted\)", summary[9])
    assert summary[10:12] == ["text column text (auto-detected)", f"model {tiny_model()} (pooling mean, dim 32)"]
    assert summary[12:] == [f"features {out}", f"rejects {tmp_path / 'o.parquet.rejects.csv'}"]
