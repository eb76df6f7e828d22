"""extract --estimate (bertfeat.run.estimate): the estimate checked against the run it estimates, on the bundled sample."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import bertfeat
from bertfeat.errors import BertfeatError
from bertfeat.run.estimate import Estimate, memory_limit
from extract_util import tiny_model, write_csv

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "sst2_sample.csv"  # 300 rows


@pytest.fixture
def corpus(tmp_path) -> Path:
    src = tmp_path / "in.csv"
    src.write_text(SAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    return src


def test_the_estimate_matches_the_run(corpus, tmp_path):
    out = tmp_path / "f.parquet"
    e = bertfeat.extract(corpus, out, pca=32, estimate=120)
    assert isinstance(e, Estimate) and sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]  # nothing written
    s = bertfeat.extract(corpus, out, pca=32)
    print(f"tokens {e.tokens} estimated, {s.tokens} run; output {e.output_bytes} estimated, {out.stat().st_size} written;"
          f" {e.tokens_per_second:.0f} tok/s measured, {s.tokens_per_s:.0f} run")
    assert (e.rows, e.rows_bad, e.sample_rows, e.dim, e.dim_out) == (300, 0, 120, 384, 32)
    assert abs(e.tokens - s.tokens) <= 0.1 * s.tokens  # a 120-row sample of 300
    assert e.output_bytes <= out.stat().st_size <= 1.5 * e.output_bytes + 20_000  # + the provenance, Parquet's footer
    assert e.memory_parts["PCA statistics (float64)"] == 2 * 384 * 384 * 8 + 4 * 384 * 8
    assert e.memory_peak_bytes > 50 << 20 and e.tokens_per_second > 0
    assert e.seconds > e.encode_seconds > 0 and e.load_seconds > 0
    full = bertfeat.extract(corpus, out, estimate=300)  # the whole input: the tokens exactly; the output exists now
    assert full.tokens == s.tokens and full.dim_out == 384
    assert json.loads(json.dumps(full.to_dict()))["rows"] == 300


def test_bad_rows_truncation_and_the_cache_are_reported(tmp_path):
    src = write_csv(tmp_path / "c.csv", ["text"], [[f"word {i} " * (40 if i % 4 == 0 else 2)] for i in range(40)]
                    + [[""], ["ok"]])
    e = bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), max_length=32, estimate=True)
    assert (e.rows, e.rows_bad, e.first_bad_row) == (42, 1, 40)
    assert 0.2 <= e.rows_truncated <= 0.3 and e.cached is None
    assert e.warnings[0] == ("1 bad row(s): the run stops at row 40 (on_bad_row='error'); skip writes them to the "
                             "rejects file")
    assert any("longer than max_length 32 and will be cut" in w for w in e.warnings)
    over = bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), max_length=32, max_bad_rows=0, estimate=True)
    assert over.warnings[0] == ("1 bad row(s), more than max_bad_rows 0 allows: the run stops there and writes nothing")
    under = bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), max_length=32, max_bad_rows="5%",
                             estimate=True)  # 1 of 42 rows: 2.4 %
    assert not any("bad row" in w for w in under.warnings), under.warnings
    cache = tmp_path / "cache"
    bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), max_length=32, cache=cache, on_bad_row="skip")
    again = bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), max_length=32, cache=cache, estimate=True)
    assert again.cached == 1.0 and again.encode_seconds == 0.0
    other = bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), pooling="cls", cache=cache, estimate=True)
    assert other.cached == 0.0  # other settings: other vectors
    # another max length: the run reuses the rows within both (the 31 short ones), so the estimate counts them cached
    shorter = bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), max_length=16, cache=cache,
                               on_bad_row="skip", estimate=True)
    assert shorter.cached == pytest.approx(31 / 41)
    s = bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), max_length=16, cache=cache, on_bad_row="skip",
                         overwrite=True)
    assert (s.rows_encoded, s.rows_reused) == (10, 31)
    # another long-text policy: the run reuses the rows within max length (31 of the 41 it encodes), so the estimate
    # counts them cached too
    chunked = bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), max_length=32, cache=cache,
                               long_text="chunk-mean", stride=4, estimate=True)
    assert chunked.cached == pytest.approx(31 / 41)


def test_estimate_checks_its_sample_size(corpus):
    with pytest.raises(BertfeatError, match=r"^estimate=1 is out of range"):
        bertfeat.extract(corpus, estimate=1)


def test_memory_limit_reads_the_cgroup_then_meminfo(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text("MemTotal: 100 kB\nMemAvailable:    2048 kB\n")
    assert memory_limit(tmp_path) == (2048 * 1024, "available memory (/proc/meminfo)")
    cg = tmp_path / "sys" / "fs" / "cgroup"
    cg.mkdir(parents=True)
    (cg / "memory.max").write_text("max\n")  # no limit
    assert memory_limit(tmp_path)[0] == 2048 * 1024
    (tmp_path / "proc" / "self").mkdir()
    (tmp_path / "proc" / "self" / "cgroup").write_text("0::/job/7\n")
    (cg / "job" / "7").mkdir(parents=True)
    (cg / "job" / "7" / "memory.max").write_text("1048576\n")
    assert memory_limit(tmp_path) == (1048576, "cgroup memory.max")
    (cg / "job" / "7" / "memory.max").write_text("9999999999\n")  # above what is available: the available memory
    assert memory_limit(tmp_path)[1] == "available memory (/proc/meminfo)"


def test_cli_prints_the_estimate_and_writes_nothing(corpus, tmp_path, capsys):
    from bertfeat.cli.app import main

    out = tmp_path / "f.parquet"
    out.write_bytes(b"an earlier run's output")  # no obstacle to an estimate
    assert main(["extract", str(corpus), "-o", str(out), "--pca", "16", "--estimate", "--estimate-rows", "60"]) == 0
    stdout, stderr = capsys.readouterr()
    flat = " ".join(stdout.split())
    squashed = re.sub(r"[\s│┌┐└┘├┤┬┴┼─]", "", stdout)  # the table's cells, wrapped lines joined
    assert flat.startswith("Estimate") and f"input{corpus}rows300tokens" in squashed, squashed
    assert "16featuresperrow(of384)" in squashed and "measured on 60 sampled rows; nothing was written" in flat
    # no warning, unless other processes held the cores while the sample was timed (two test workers on 2 cores)
    assert all(x.startswith("Warning: the machine was busy while the sample was timed") for x in stderr.splitlines())
    assert out.read_bytes() == b"an earlier run's output"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.parquet", "in.csv"]
    # -q: no table ('No progress and no summary'; it printed the table whole: found by the sweep audit), the JSON yes
    assert main(["extract", str(corpus), "-o", str(out), "--estimate", "--estimate-rows", "60", "-q",
                 "--summary-json", str(tmp_path / "e.json")]) == 0
    stdout, stderr = capsys.readouterr()
    assert stdout == "" and all(x.startswith("Warning: the machine was busy") for x in stderr.splitlines())
    assert json.loads((tmp_path / "e.json").read_text())["rows"] == 300
    (tmp_path / "e.json").unlink()
    assert main(["extract", str(corpus), "--estimate-rows", "60"]) == 1
    assert capsys.readouterr().err == "Error: --estimate-rows applies to --estimate - add --estimate, or drop --estimate-rows\n"
    assert main(["extract", str(corpus), "--estimate", "--estimate-rows", "1"]) == 1
    assert capsys.readouterr().err.startswith("Error: --estimate-rows 1 is out of range")


def test_too_long_rows_under_long_text_error_and_kept_values(tmp_path):
    """--long-text error: the estimate failed ("row 22 has 202 tokens", a sample position) where the run goes on
    (skip) or stops at the input row; kept columns were sized by the length of their names."""
    rows = [[f"r{i}", "x" * 400, f"word {i} " * (60 if i % 5 == 0 else 2)] for i in range(40)]
    src = write_csv(tmp_path / "c.csv", ["id", "note", "text"], rows)
    e = bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), max_length=32, long_text="error",
                         on_bad_row="skip", keep="note", estimate=True)
    assert (e.rows, e.rows_too_long, e.sample_rows) == (40, 8, 32)
    assert e.output_bytes >= 32 * 400  # the kept values' bytes, not their column name's
    s = bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), max_length=32, long_text="error",
                         on_bad_row="skip", keep="note")
    assert s.rows_rejected == 8 and s.rows_written == 32
    stop = bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), max_length=32, long_text="error",
                            keep="note", estimate=True, overwrite=True)
    assert any(w.startswith("~8 row(s) are longer than max_length 32: the run (long_text='error') stops at the first")
               for w in stop.warnings), stop.warnings


def test_the_time_comes_with_its_likely_range():
    from bertfeat.run.estimate import TIMING_DRIFT, time_range

    assert time_range(100.0, 80.0, 0.0, 1.0) == pytest.approx((20 + 80 * (1 - TIMING_DRIFT), 20 + 80 * (1 + TIMING_DRIFT)))
    low, high = time_range(100.0, 80.0, 0.05, 1.0)  # a spread of tokens per row widens it
    assert high - low > 2 * 80 * TIMING_DRIFT and low < 100 < high
    busy = time_range(100.0, 80.0, 0.0, 0.5)  # timed with half the CPU: with the cores to itself it may take half
    assert busy[0] == pytest.approx(20 + 80 * (1 - TIMING_DRIFT) * 0.5) and busy[1] == pytest.approx(high - 0.0, rel=0.2)


def test_a_busy_machine_is_said(corpus, tmp_path, monkeypatch):
    import bertfeat.run.estimate as est

    e = bertfeat.extract(corpus, tmp_path / "f.parquet", estimate=60)
    assert e.seconds_low <= e.seconds <= e.seconds_high and 0 < e.cpu_share <= 1
    clock = iter([{"1": (0, 0)}, {"1": (10**9, 3 * 10**9)}])  # as if it waited 3 s for a core per second on one
    monkeypatch.setattr(est, "_sched_seconds", lambda: next(clock))
    e = bertfeat.extract(corpus, tmp_path / "f.parquet", estimate=60)
    assert e.cpu_share == 0.25 and e.seconds_low < e.seconds
    assert ("the machine was busy while the sample was timed (its threads had a core 25 % of the time they wanted "
            "one): the time is long if the run has the cores to itself") in e.warnings


def test_repeated_rows_are_encoded_once_in_the_estimate_as_in_the_run(tmp_path, capsys):
    """The run encodes a repeated row once (cache.reuse); the estimate timed every row, so a corpus of 300 texts
    repeated ten times was estimated at ten times its encode."""
    from extract_util import run

    lines = SAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)
    src = tmp_path / "dup.csv"
    src.write_text(lines[0] + "".join(lines[1:] * 10), encoding="utf-8")
    e = bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), estimate=True)
    assert (e.rows, e.rows_distinct) == (3000, 300)
    plain = bertfeat.extract(SAMPLE, tmp_path / "p.parquet", model=tiny_model(), estimate=True)
    assert plain.rows_distinct == 300 and plain.sample_rows == 300  # every row sampled: its exact tokens per row
    assert e.encode_seconds == pytest.approx(plain.tokens_per_row * 300 / e.tokens_per_second)
    assert e.tokens == pytest.approx(e.tokens_per_row * 3000, abs=1)  # the output still has every row's tokens
    s = bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), quiet=True)
    assert s.rows_encoded == 300  # what the estimate counted
    rc, out, _ = run(capsys, "extract", src, "-o", tmp_path / "o2.parquet", "--model", tiny_model(), "--estimate")
    assert rc == 0 and "│ rows           │ 3,000, ~300 distinct (a repeated row is encoded once)" in out


class TestTheDistinctRowsOwnTokens:
    """The run encodes the distinct rows; the estimate multiplied their count by the tokens per row of a sample of all
    rows, where a repeated row weighs its count: 540 copies of "ok" and 60 long texts were estimated at a ninth of
    the tokens the run encoded."""

    def test_repeats_shorter_than_the_distinct_rows(self, tmp_path):
        long = [f"review {i} of the film said that the plot was good and the cast was fine" for i in range(60)]
        src = tmp_path / "skew.csv"
        src.write_text("text\n" + "ok\n" * 540 + "".join(f"{t}\n" for t in long), encoding="utf-8")
        e = bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), estimate=True, cache=None)
        s = bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), quiet=True, cache=None)
        assert (e.rows_distinct, s.rows_encoded) == (61, 61)
        assert s.rows_truncated == 0  # tokens_encoded counts before truncation, the estimate the tokens run
        assert e.encode_seconds * e.tokens_per_second == pytest.approx(s.tokens_encoded, rel=1e-9)
        assert e.tokens == pytest.approx(e.tokens_per_row * 600, abs=1)  # the output's tokens: every row's

    def test_the_sample_of_distinct_rows_does_not_favour_repeats(self):
        from bertfeat.run.estimate import DistinctRows

        d = DistinctRows(keep=100)
        for start in range(0, 1000, 250):  # 1,000 distinct rows, one in ten repeated 100 times
            d.add([(f"row {i}", None) for i in range(start, start + 250) for _ in range(100 if i % 10 == 0 else 1)])
        rows = d.sample()
        assert len(rows) == len(set(rows)) == 100
        heavy = sum(int(t.split()[1]) % 10 == 0 for t, _ in rows)
        assert 3 <= heavy <= 20, heavy  # about 10 %, where a sample of all rows holds ~92 %


def test_distinct_rows_is_exact_up_to_k_then_close():
    from bertfeat.run.estimate import DistinctRows

    d = DistinctRows(k=1024)
    for start in range(0, 50_000, 5_000):
        d.add([(f"text {i % 20_000}", None) for i in range(start, start + 5_000)])  # 20,000 distinct, each 2.5x
    assert abs(d.count() - 20_000) <= 0.1 * 20_000  # ~1/sqrt(1024) = 3 % typical
    small = DistinctRows(k=1024)
    small.add([("a", None), ("b", None), ("a", None), ("a", "b")])
    assert small.count() == 3


class TestDistinctRowsAtItsBoundary:
    """DistinctRows kept k hashes, so exactly k distinct rows were taken for more and estimated (k - 1 or so, a
    different number for other texts). It is exact up to k distinct rows and estimates from k + 1 on, however the
    rows come (in batches, repeated, with pairs)."""

    K = 16

    def rows(self, n: int, word: str = "text") -> list[tuple]:
        return [(f"{word} {i}", None if i % 3 else f"pair {i}") for i in range(n)]

    def counted(self, n: int, k: int, word: str = "text") -> int:
        from bertfeat.run.estimate import DistinctRows

        d = DistinctRows(k=k)
        rows = self.rows(n, word)
        for start in range(0, len(rows), 5):  # batches of 5, each row twice, the second time in another batch
            d.add(rows[start:start + 5] + rows[max(0, start - 5):start])
        d.add(rows[::-1])
        return d.count()

    @pytest.mark.parametrize("k", [K, 1 << 10])
    @pytest.mark.parametrize("word", ["text", "row", "zeile", "ligne"])  # other hashes: never right by chance
    def test_exact_up_to_k(self, k, word):
        assert [self.counted(n, k, word) for n in (1, k - 1, k)] == [1, k - 1, k]

    def test_the_estimate_starts_past_k(self):
        from bertfeat.run.estimate import _row_hash

        k = self.K
        kth = sorted({_row_hash(t, p) for t, p in self.rows(k + 1)})[k - 1]  # the k-th smallest of the rows' hashes
        assert self.counted(k + 1, k) == round((k - 1) / ((kth + 1) / 2**64))  # the k-minimum-values estimate


@pytest.mark.parametrize("rows, pca, warning", [
    (6, 7, "pca=7 needs at least 7 rows, the run has 6: the run refuses it before encoding a row; choose "
           "pca <= 6 or a fraction such as 0.95"),
    (6, "mle", "pca='mle' needs at least as many rows as features (32), the run has 6: the run refuses it before "
               "encoding a row; pass a number of components or a fraction such as 0.95"),
    (1, 0.95, "1 row(s) to fit the PCA on, it needs at least 2: the run refuses it before encoding a row"),
    (6, 6, None), (6, "all", None), (40, "mle", None)])
def test_a_pca_the_rows_cannot_give_is_warned_of(tmp_path, rows, pca, warning):
    # the run refuses these before encoding (the file's lines give its rows: encoder_setup.pca_rows_refusal); the
    # estimate says so, and does not refuse
    src = write_csv(tmp_path / "c.csv", ["text"], [[f"sentence {i} about things"] for i in range(rows)])
    e = bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), pca=pca, estimate=True)
    got = [w for w in e.warnings if "pca" in w.lower()]
    assert got == ([warning] if warning else []), e.warnings
    if warning:
        with pytest.raises(BertfeatError):
            bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), pca=pca)
    else:
        bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), pca=pca)


def test_a_pca_warning_counts_the_rows_left_after_bad_ones(tmp_path):
    src = write_csv(tmp_path / "c.csv", ["text"], [["a sentence"], [""], ["another one"], [" "]])
    e = bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), pca=3, on_bad_row="skip", estimate=True)
    assert e.warnings[0] == ("pca=3 needs at least 3 rows, the run has 2: the run stops after encoding them and writes "
                             "nothing; choose pca <= 2 or a fraction such as 0.95")


def test_long_ids_are_in_the_output_size(tmp_path):
    """1,000-character ids: the estimate's output size left them out (468,000 bytes estimated for a 775,704-byte
    Parquet file, found by the sweep/estimate audit); the kept values were counted, the id not."""
    import random

    rng = random.Random(5)
    rows = [["".join(rng.choice("0123456789abcdef") for _ in range(1000)), f"sentence number {i} of a few words"]
            for i in range(200)]  # (random hex: no Parquet encoding makes them much smaller)
    src = write_csv(tmp_path / "c.csv", ["id", "text"], rows)
    e = bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), id_column="id", estimate=True)
    bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), id_column="id", quiet=True)
    size = (tmp_path / "o.parquet").stat().st_size
    assert e.output_bytes >= 200 * 1000 and 0.6 * size <= e.output_bytes <= 1.5 * size + 20_000, (e.output_bytes, size)
    assert e.disk_peak_bytes >= 2 * 200 * 1000  # the parts hold the ids too
