"""The README's and docs/'s commands work: every ```bash block is split into commands and run, in order.

Pages: README.md first, then the docs/ pages in DOC_ORDER (then any other docs/*.md), in one
working directory, so a page may use the files an earlier page's commands made.

How: the commands run one by one (``bash -o pipefail -c``, so pipes and ``VAR=value cmd`` work
exactly as typed) in one temporary directory that holds a copy of the README's input files in
``examples/``. The README's own text is run, not a copy of it. To keep the whole test under two
minutes on a small machine, the copy of ``examples/sst2_sample.csv`` keeps its first 70 rows
(``--pca 64`` needs at least 64). Each command must exit 0 and the files it names (``-o``,
``--output``, ``--save-npy``, ``extract``'s default output, the ``--pca`` / ``pca fit`` model and
report files, the ``.npy`` sidecars, ...) must exist afterwards. The ```python blocks run too.

Not run (SKIP, each with its reason): installs, ``make`` targets (``make features`` has its own
test in test_examples_make.py, ``make test`` is this suite), downloads, the example scripts
(smoke-tested in test_examples.py) and Dask cluster commands. Commands that need
bert-base-uncased/-chinese (MODEL_NEEDED) run: they pass if the model is there, and otherwise must
fail with the clean one-line "model ... not found" error. EXPECTED_ERRORS lists the commands the
README shows failing on purpose, with the message they must print.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOC_ORDER = ("cli.md", "models.md", "output.md", "python.md", "sklearn.md", "inspect.md", "errors.md", "precision.md",
             "performance.md", "dask.md", "testing.md", "limitations.md", "classify.md", "sts.md")


def pages() -> list[Path]:
    """README.md, then docs/ in DOC_ORDER, then any other docs/*.md (sorted)."""
    docs = ROOT / "docs"
    ordered = [docs / n for n in DOC_ORDER if (docs / n).is_file()]
    return [README] + ordered + sorted(p for p in docs.glob("*.md") if p not in ordered)
SAMPLE_ROWS = 70
INPUT_FILES = ("sst2_sample.csv", "pairs.jsonl", "messy.csv", "ids_mixed.jsonl")

# (regex on the command, reason): commands that are not run here.
SKIP = [
    (r"^make (install|test)\b", "make install sets up the machine; make test is this test suite"),
    (r"^make bench\b", "the benchmark takes many minutes"),
    (r"^python benchmarks/", "a benchmark run: minutes, each method in its own process"),
    (r"^python -m pytest\b", "the test suite runs itself"),
    (r"^python examples/precision_check\.py\b", "minutes of CPU: fp32, bf16 and int8 runs of the accuracy examples"),
    (r"^make precision-check\b", "minutes of CPU: python examples/precision_check.py all"),
    (r"^make (-f \S+ )?(features|classify|sts)\b",
     "make features: tests/test_examples_make.py; classify/sts: tests/test_examples.py"),
    (r"^pip install\b", "installs packages"),
    (r"^(hf|huggingface-cli) download\b", "needs internet access"),
    (r"^python examples/(classify|sts)\.py\b", "minutes of CPU; smoke-tested with --limit in tests/test_examples.py"),
    (r"^(\w+=\S* )*dask (scheduler|worker)\b", "starts long-running cluster processes"),
    (r"--scheduler tcp://", "needs a running Dask cluster"),
]

# (regex, expected text on stderr[, exit code]): commands the README shows failing on purpose (exit code 1 unless given).
EXPECTED_ERRORS = [
    (r"^bertfeat extract examples/messy\.csv --id-column id$", "Error: examples/messy.csv row 1: empty text"),
    (r"^bertfeat extract examples/messy\.csv --id-column id --max-bad-rows 2 ",
     "Error: examples/messy.csv: 3 bad rows among the 6 rows read, more than --max-bad-rows 2 allows", 3),
    (r"^bertfeat pca transform cls\.parquet .*-o cls\.reduced\.parquet$", "Error: the features come from a different source"),
    (r'^bertfeat fill-mask "The capital of France is \[MASK\]\."$', "has no masked-language-model head"),
]

# Commands whose shown output (the ```console block after them) is deterministic and compared line by line
# (lines with "..." are elisions and skipped).
OUTPUT_CHECKED = [
    r"^cat messy\.parquet\.rejects\.csv$",
    r'^bertfeat tokens "Unaffable cats purr\." --pair "Do they\?"$',
]

# Commands that need bf16 / int8 hardware: they run, and pass if they succeed or if they fail with the one-line
# refusal of a CPU without AMX / AVX512-BF16 / VNNI (or without oneDNN), as on the AVX2 machines CI may run on.
BF16_NEEDED = r"--precision (bf16|int8)\b"
BF16_REFUSALS = ("has no AMX or AVX512-BF16", "needs oneDNN", "not on a native bf16 kernel", "has no VNNI or AMX",
                 "not on a VNNI or AMX kernel")

# Commands that need weights which may not be on this machine: model name -> regex.
MODEL_NEEDED = [
    ("bert-base-uncased", r"bert-base-uncased"),
    ("bert-base-chinese", r"bert-base-chinese"),
]


# --------------------------------------------------------------------------- README parsing
def fenced_blocks(text: str, lang: str) -> list[str]:
    """The bodies of the ```lang blocks (indented fences included)."""
    out, body, inside = [], [], False
    for line in text.splitlines():
        stripped = line.strip()
        if not inside and stripped == f"```{lang}":
            inside, body, indent = True, [], len(line) - len(line.lstrip())
        elif inside and stripped == "```":
            out.append("\n".join(body))
            inside = False
        elif inside:
            body.append(line[indent:] if line[:indent].strip() == "" else line)
    return out


def commands(block: str) -> list[str]:
    """A bash block -> its commands: comments and blank lines dropped, backslash continuations joined."""
    out, pending = [], ""
    for line in block.splitlines():
        if pending:
            line = pending + " " + line.strip()
            pending = ""
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1].rstrip()
            continue
        code = strip_comment(line).strip()
        if code:
            out.append(code)
    return out


def strip_comment(line: str) -> str:
    """Drop a trailing `# comment` that is outside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def readme_commands() -> list[str]:
    """Every command of every page, in page order."""
    return [c for p in pages() for b in fenced_blocks(p.read_text(encoding="utf-8"), "bash") for c in commands(b)]


def shown_outputs() -> list[tuple[str, str]]:
    """(command, the ```console block right after the ```bash block that ends with it), on every page."""
    out = []
    for p in pages():
        prev_cmd = None
        kinds = re.findall(r"^```(bash|console|python|)\n(.*?)^```$", p.read_text(encoding="utf-8"), flags=re.S | re.M)
        for lang, body in kinds:
            if lang == "console" and prev_cmd:
                out.append((prev_cmd, body))
            cmds = commands(body) if lang == "bash" else []
            prev_cmd = cmds[-1] if cmds else None
    return out


def classify(cmd: str) -> tuple[str, str | None]:
    """-> ('skip', reason) | ('error', expected text) | ('model', name) | ('run', None)."""
    for pattern, reason in SKIP:
        if re.search(pattern, cmd):
            return "skip", reason
    for pattern, expected, *code in EXPECTED_ERRORS:
        if re.search(pattern, cmd):
            return "error", (expected, code[0] if code else 1)
    for name, pattern in MODEL_NEEDED:
        if re.search(pattern, cmd):
            return "model", name
    if re.search(BF16_NEEDED, cmd):
        return "bf16", None
    return "run", None


# --------------------------------------------------------------------------- files a command names
def _argv(cmd: str) -> list[str]:
    """The bertfeat argv of a command (after env assignments and a `... |` pipe), else []."""
    part = cmd.split("|")[-1].strip()
    words = shlex.split(part)
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words = words[1:]
    return words[1:] if words and words[0] == "bertfeat" else []


def _option(argv: list[str], *names: str) -> str | None:
    for i, w in enumerate(argv):
        for n in names:
            if w == n and i + 1 < len(argv):
                return argv[i + 1]
            if w.startswith(n + "="):
                return w.split("=", 1)[1]
    return None


def _positional(argv: list[str]) -> list[str]:
    """Positional arguments of a bertfeat sub-command (options taking a value are skipped)."""
    flags = {"--normalize", "--wide", "--resume", "--quiet", "-q", "--json", "--all-heads", "--force", "--whiten",
             "--estimate"}
    out, i = [], 0
    while i < len(argv):
        w = argv[i]
        if w.startswith("-") and w != "-":
            i += 1 if (w in flags or "=" in w) else 2
            continue
        out.append(w)
        i += 1
    return out


def expected_files(cmd: str) -> list[str]:
    """Files the command names as outputs, which must exist after it ran."""
    argv = _argv(cmd)
    if not argv:
        return []
    sub = argv[0]
    files: list[str] = []
    if sub == "extract" and "--estimate" in argv:
        return []  # writes nothing
    if sub == "extract":
        from bertfeat.run.plan import default_output

        out = _option(argv, "-o", "--output")
        dask = _option(argv, "--engine") == "dask"
        fmt = _option(argv, "--format") or (Path(out).suffix.lstrip(".") if out and Path(out).suffix in (".npy", ".csv") else "parquet")
        out = out or str(default_output(_positional(argv[1:])[0], fmt))
        files.append(out)
        if fmt == "npy":
            files += [str(Path(out).with_name(Path(out).stem + ".ids.csv")), out + ".json"]
        elif fmt == "csv":
            files.append(out + ".json")
        if dask:
            files.append(str(Path(out) / "_bertfeat.json"))
        if _option(argv, "--pca"):
            stem = str(Path(out).with_suffix(""))
            files += [stem + ".pca.npz"] + [f"{stem}.pca.report.{k}" for k in ("json", "md", "png")]
    elif sub == "pca" and argv[1:2] == ["fit"]:
        out = _option(argv, "-o", "--output")
        prefix = out[:-4] if out.endswith(".npz") else out
        files += [out] + [f"{prefix}.report.{k}" for k in ("json", "md", "png")]
    elif sub == "pca" and argv[1:2] == ["transform"]:
        files.append(_option(argv, "-o", "--output"))
    elif sub == "report":
        prefix = _option(argv, "-o", "--output") or _positional(argv[1:])[0][:-4]
        files += [f"{prefix}.report.{k}" for k in ("json", "md", "png")]
    elif sub == "sweep":
        from bertfeat.sweep import default_prefix

        prefix = _option(argv, "-o", "--output") or str(default_prefix(_positional(argv[1:])[0]))
        files += [f"{prefix}.json", f"{prefix}.md"]
    elif sub == "attention":
        files.append(_option(argv, "-o", "--output"))
        if _option(argv, "--save-npy"):
            files.append(_option(argv, "--save-npy"))
    return files


# --------------------------------------------------------------------------- running
def _env() -> dict:
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _run(cmd: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=600)


def _model_available(name: str) -> bool:
    from bertfeat.errors import BertfeatError
    from bertfeat.model.hub import resolve_model

    try:
        resolve_model(name)
        return True
    except BertfeatError:
        return False


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("readme")
    (d / "examples").mkdir()
    for name in INPUT_FILES:
        shutil.copy(ROOT / "examples" / name, d / "examples" / name)
    lines = (ROOT / "examples" / "sst2_sample.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    (d / "examples" / "sst2_sample.csv").write_text("".join(lines[: SAMPLE_ROWS + 1]), encoding="utf-8")
    return d


# --------------------------------------------------------------------------- tests
def test_parsing_helpers():
    block = "# a comment\nbertfeat extract a.csv \\\n  -o b.parquet   # trailing\n\ncat x | bertfeat tokens \"# not a comment\"\n"
    assert commands(block) == ["bertfeat extract a.csv -o b.parquet", 'cat x | bertfeat tokens "# not a comment"']
    assert expected_files("bertfeat extract in/x.csv --pca 8") == [
        "in/x.features.parquet", "in/x.features.pca.npz", "in/x.features.pca.report.json",
        "in/x.features.pca.report.md", "in/x.features.pca.report.png"]
    assert expected_files("bertfeat extract x.csv -o y.npy") == ["y.npy", "y.ids.csv", "y.npy.json"]
    assert expected_files("bertfeat report m.npz -o r") == ["r.report.json", "r.report.md", "r.report.png"]


def test_readme_mentions_every_command():
    """Each command of `bertfeat --help` (and pca fit/transform) has an example in a bash block."""
    run = readme_commands()
    for sub in ("extract", "pca fit", "pca transform", "report", "info", "tokens", "attention", "fill-mask", "verify"):
        assert any(c.startswith(f"bertfeat {sub} ") or c == f"bertfeat {sub}" for c in run), sub
    for flag in ("--pca", "--text-column", "--pair-column", "--id-column", "--input-format", "--pooling", "--layers",
                 "--layer-agg", "--normalize", "--max-length", "--long-text", "--stride", "--on-bad-row", "--resume",
                 "--wide", "--threads", "--max-batch-tokens", "--quiet", "--chunk-rows", "--engine dask", "--workers"):
        assert any(flag in c for c in run if c.startswith(("bertfeat extract", "cat "))), flag
    assert "make features" in run and "make install" in run and "make test" in run


def test_every_readme_command_is_run_or_listed():
    """Nothing is skipped by accident: every skip matches a SKIP rule with a reason."""
    cmds = readme_commands()
    assert len(cmds) > 30
    kinds = [classify(c)[0] for c in cmds]
    assert kinds.count("run") >= 20
    for pattern, *_ in EXPECTED_ERRORS:
        assert any(re.search(pattern, c) for c in cmds), f"EXPECTED_ERRORS entry matches no README command: {pattern}"


def test_readme_commands(workdir: Path):
    """Run the README's bash commands in order; report every failure at once."""
    t0 = time.perf_counter()
    failures, ran, timings = [], 0, []
    shown = dict(shown_outputs())
    for cmd in readme_commands():
        kind, detail = classify(cmd)
        if kind == "skip":
            continue
        t = time.perf_counter()
        p = _run(cmd, workdir)
        timings.append((time.perf_counter() - t, cmd))
        ran += 1
        if kind == "bf16" and p.returncode == 1 and any(r in p.stderr for r in BF16_REFUSALS):
            if "Traceback" in p.stderr or len(p.stderr.strip().splitlines()) > 1:
                failures.append(f"{cmd}\n  the bf16 refusal is not one clean line: {p.stderr.strip()[-600:]}")
            continue
        if kind == "error" or (kind == "model" and not _model_available(detail)):
            expected, code = detail if kind == "error" else ("not found; looked in:", 1)
            if p.returncode != code or expected not in p.stderr:
                failures.append(f"{cmd}\n  expected exit {code} with {expected!r}, got {p.returncode}: "
                                f"{p.stderr.strip()[-600:]}")
            elif "Traceback" in p.stderr or len(p.stderr.strip().splitlines()) > 3:
                failures.append(f"{cmd}\n  the error is not one clean line: {p.stderr.strip()[-600:]}")
            continue
        if p.returncode != 0:
            failures.append(f"{cmd}\n  exit {p.returncode}: {p.stderr.strip()[-800:]}")
            continue
        missing = [f for f in expected_files(cmd) if not (workdir / f).exists()]
        if missing:
            failures.append(f"{cmd}\n  did not write {missing}")
        if any(re.search(pat, cmd) for pat in OUTPUT_CHECKED):
            got = p.stdout + p.stderr
            wrong = [line for line in shown.get(cmd, "").splitlines() if line.strip() and "..." not in line
                     and line.rstrip() not in got]
            if cmd not in shown or wrong:
                failures.append(f"{cmd}\n  output differs from the page: missing {wrong or 'the console block'}\n{got[-800:]}")
    slowest = sorted(timings, reverse=True)[:5]
    print(f"ran {ran} README commands in {time.perf_counter() - t0:.1f} s; slowest: "
          + "; ".join(f"{s:.1f} s {c[:60]}" for s, c in slowest))
    assert not failures, "README commands failed:\n" + "\n".join(failures)


def test_readme_python_blocks(workdir: Path):
    """The ```python blocks run (after the bash blocks made the files they read)."""
    if not (workdir / "examples" / "sst2_sample.features.parquet").exists():
        _run("bertfeat extract examples/sst2_sample.csv --pca 64 --quiet", workdir)
    blocks = [b for page in pages() for b in fenced_blocks(page.read_text(encoding="utf-8"), "python")]
    failed = []
    for block in blocks:
        if block.startswith("# not run:"):  # e.g. needs a model that is not on this machine; the reason follows
            continue
        p = subprocess.run([sys.executable, "-c", block], cwd=workdir, env=_env(), capture_output=True, text=True,
                           timeout=300)
        if p.returncode != 0 and 'precision="bf16"' in block and any(r in p.stderr for r in BF16_REFUSALS):
            continue  # a CPU without AMX / AVX512-BF16 (or without oneDNN) refuses bf16 in one line, as the CLI does
        if p.returncode != 0:  # collect them all, so one run shows every broken block
            failed.append(f"python block failed:\n{block}\n{p.stderr[-1500:]}")
    assert not failed, f"{len(failed)} of {len(blocks)} python blocks failed:\n\n" + "\n\n".join(failed)


def test_readme_quickstart_numbers(tmp_path: Path):
    """The variance and components the README quotes for the quickstart (the whole sample, not the workdir's
    shortened one), and the probe docs/cli.md quotes for it with --label, are what its report says."""
    (tmp_path / "examples").mkdir()
    shutil.copy(ROOT / "examples" / "sst2_sample.csv", tmp_path / "examples")
    p = _run("bertfeat extract examples/sst2_sample.csv --pca 64 --label label --quiet", tmp_path)  # --label: cli.md
    assert p.returncode == 0, p.stderr
    report = json.loads((tmp_path / "examples" / "sst2_sample.features.pca.report.json").read_text(encoding="utf-8"))
    text = " ".join(README.read_text(encoding="utf-8").split())
    m = re.search(r"With (\d+) sentences, (\d+) components keep (\d+) % of the variance; (\d+) keep 80 % and (\d+) keep "
                  r"95 %, and the broken-stick rule suggests (\d+)\.", text)
    assert m, "the README's quickstart sentence changed: update this test"
    rows, k, kept, k80, k95, stick = map(int, m.groups())
    by = {t["fraction"]: t["components"] for t in report["thresholds"]}
    assert (rows, k, kept) == (report["n_samples"], report["n_components"], round(100 * report["variance_kept"]))
    assert (k80, k95, stick) == (by[0.8], by[0.95], report["suggestions"]["broken_stick"]["components"])
    cli_md = " ".join((ROOT / "docs" / "cli.md").read_text(encoding="utf-8").split())
    m = re.search(r"`probe label ([\d.]+) % with 64 components, best ([\d.]+) % with (\d+) \(majority class ([\d.]+) %; "
                  r"every k in the report\)` for the Quickstart with `--label label`", cli_md)
    assert m, "docs/cli.md's --label example changed: update this test"
    probe = report["probe"]
    best = max(probe["accuracy"], key=lambda a: (a["accuracy"], -a["components"]))
    assert m.groups() == (f"{100 * probe['accuracy'][-1]['accuracy']:.2f}", f"{100 * best['accuracy']:.2f}",
                          str(best["components"]), f"{100 * probe['majority_baseline']:.2f}")


def _table(doc: str) -> list[list[str]]:
    """The cells of the table rows of docs/DOC (header and rule included)."""
    lines = (ROOT / "docs" / doc).read_text(encoding="utf-8").splitlines()
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines if line.startswith("|")]


def test_readme_results_match_docs():
    """The accuracy and STS numbers the README quotes are the ones the example scripts wrote to docs/."""
    readme = " ".join(README.read_text(encoding="utf-8").split())
    m = re.search(r"SST-2 ([\d.]+) %, TREC ([\d.]+) % with logistic regression", readme)
    assert m, "the README's classify numbers changed: update this test"
    raw = {row[0]: row[2] for row in _table("classify.md")}  # task -> raw (384) accuracy
    assert (raw["SST-2"], raw["TREC"]) == m.groups()
    m = re.search(r"STS Benchmark dev Spearman ([\d.]+), the published all-MiniLM-L6-v2 number", readme)
    assert m, "the README's STS number changed: update this test"
    default = [row for row in _table("sts.md") if row[0] == "the model's own embedding (the default)"]
    assert [row[3:5] for row in default] == [[m.group(1), m.group(1)]]
    assert (ROOT / "docs" / "classify.png").is_file() and (ROOT / "docs" / "pca_report.png").is_file()


def test_every_cli_option_is_documented():
    """Each command and each of its options is named in docs/cli.md (or inspect.md / dask.md, where it sends them)."""
    import typer.main

    from bertfeat.cli.app import app

    # the command reference, and the pages it sends the inspection and Dask options to
    ref = "".join((ROOT / "docs" / n).read_text(encoding="utf-8") for n in ("cli.md", "inspect.md", "dask.md"))
    missing = []

    def walk(cmd, path):
        if hasattr(cmd, "commands"):  # a group (typer ships its own click, so no isinstance)
            for name, sub in cmd.commands.items():
                walk(sub, path + [name])
            return
        if " ".join(path) not in ref:
            missing.append(" ".join(path))
        for prm in cmd.params:
            if prm.param_type_name == "option" and not any(o in ref for o in prm.opts + prm.secondary_opts):
                missing.append(f"{' '.join(path)} {prm.opts[0]}")

    walk(typer.main.get_command(app), ["bertfeat"])
    assert not missing, f"not in docs/cli.md: {missing}"


def test_shown_outputs_are_attached():
    """Every OUTPUT_CHECKED command has a console block after it on some page (so the comparison happens)."""
    shown = dict(shown_outputs())
    for pat in OUTPUT_CHECKED:
        assert any(re.search(pat, c) for c in shown), pat
