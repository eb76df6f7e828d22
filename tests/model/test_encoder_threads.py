"""An Encoder used from several threads at once, and in a process forked while another thread used it.

Fork tests run in a subprocess with a timeout (a deadlock fails the test, never hangs the suite)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from bertfeat import Encoder
from bertfeat.model.batching import parallel_map

TEXTS = [f"sentence {i} about " + " ".join(["cats", "dogs", "films", "rain"][j % 4] for j in range(i % 13 + 1))
         for i in range(30)]


def blas_threads() -> list[int]:
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


def test_overlapping_encodes_restore_blas_threads():
    """Two encodes in two threads, the first ending first: BLAS gets its threads back once both end (it stayed at
    one thread for the rest of the process: the second saved the first's limit of 1 and restored that)."""
    entered = [threading.Event(), threading.Event()]
    release = [threading.Event(), threading.Event()]

    def fn(k):
        entered[k].set()
        assert release[k].wait(30)
        return k

    with threadpool_limits(limits=2, user_api="blas"):
        before = blas_threads()
        with ThreadPoolExecutor(2) as ex:
            a = ex.submit(parallel_map, lambda _: fn(0), [0], 1)
            assert entered[0].wait(30)
            b = ex.submit(parallel_map, lambda _: fn(1), [0], 1)
            assert entered[1].wait(30)
            assert set(blas_threads()) == {1}  # one BLAS thread while any batch runs
            release[0].set()
            a.result(30)
            release[1].set()
            b.result(30)
        assert blas_threads() == before == [2] * len(before)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_one_encoder_in_threads_bit_for_bit(minilm_dir, precision, monkeypatch):
    """One Encoder, six threads, different poolings, prompts, long-text modes and row orders: each result is the
    single-threaded encode's, bit for bit."""
    from extract_util import NOT_BIT_FOR_BIT, precision_here, rows_bit_for_bit

    precision_here(precision, monkeypatch)
    if not rows_bit_for_bit():  # (reversed rows are other batches)
        pytest.skip(NOT_BIT_FOR_BIT)
    enc = Encoder(minilm_dir, precision=precision)
    if enc.gemm_path.library != "onednn":  # fp32 on oneDNN (BERTFEAT_GEMM=onednn on AVX2) and bf16 emulated
        pytest.skip(f"{precision} runs on NumPy's BLAS here ({enc.gemm_path.library}), whose rows round by their batch")
    jobs = [{}, {"pooling": "cls"}, {"pooling": "max", "layers": "-2:", "layer_agg": "concat"}, {"prompt": "query: "},
            {"normalize": False, "truncate_dim": 64}, {"max_length": 8, "long_text": "chunk-mean", "stride": 2}]
    ref = [enc.encode(TEXTS, **k) for k in jobs]

    def work(i):
        order = slice(None, None, -1) if i % 2 else slice(None)
        return enc.encode(TEXTS[order], **jobs[i % len(jobs)])[order]

    with ThreadPoolExecutor(6) as ex:
        for i, X in enumerate(ex.map(work, range(2 * len(jobs)))):
            np.testing.assert_array_equal(X, ref[i % len(jobs)], err_msg=str(jobs[i % len(jobs)]))


FORK_WHILE_TOKENIZING = textwrap.dedent("""
    import faulthandler, os, sys, threading, time
    import numpy as np
    from bertfeat import Encoder

    enc = Encoder(sys.argv[1], threads=1)
    texts = ["a sentence of a few words for the tokenizer %d" % i for i in range(30)]
    ref = enc.encode(texts)
    busy = threading.Event()

    def tokenize():  # in a call of the Rust tokenizer (its GIL released) when the main thread forks
        busy.set()
        enc.tokenizer.encode(["some words here and there, a longer sentence %d" % i for i in range(200_000)])

    th = threading.Thread(target=tokenize, daemon=True)
    th.start()
    busy.wait()
    time.sleep(0.3)
    pid = os.fork()
    if pid == 0:
        faulthandler.dump_traceback_later(40, exit=True)  # a deadlock: exit 1 with the stack
        os._exit(0 if np.array_equal(enc.encode(texts), ref) else 3)
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status))
""")


def test_fork_while_another_thread_tokenizes(minilm_dir):
    """A child forked while another thread was inside the tokenizer encodes, with the parent's vectors (it waited
    forever on a lock that thread held: the tokenizer's, then the Rust tokenizer's own)."""
    r = subprocess.run([sys.executable, "-c", FORK_WHILE_TOKENIZING, str(minilm_dir)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "child 0", r.stderr[-2000:]


FORK_WITH_TOKENIZERS_PARALLELISM = textwrap.dedent("""
    import faulthandler, os, sys
    import numpy as np
    from bertfeat import Encoder

    enc = Encoder(sys.argv[1])
    texts = ["a sentence of a few words for the tokenizer %d" % i for i in range(40)]
    ref = enc.encode(texts)  # the tokenizers library's thread pool runs here
    pid = os.fork()
    if pid == 0:
        faulthandler.dump_traceback_later(40, exit=True)  # a deadlock: exit 1 with the stack
        same = np.array_equal(enc.encode(texts), ref)
        os._exit(0 if same and os.environ["TOKENIZERS_PARALLELISM"] == "false" else 3)
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status), os.environ["TOKENIZERS_PARALLELISM"])
""")


@pytest.mark.parametrize("value", ["true", "1"])
def test_fork_with_tokenizers_parallelism_set(minilm_dir, value):
    """TOKENIZERS_PARALLELISM=true set by the user, a fork after an encode: the child encodes, with the parent's
    vectors, tokenizing on one thread (it waited forever on the parent's tokenizer thread pool: the tokenizers
    library turns the pool off in a child only when the variable is unset); the parent keeps the user's value."""
    env = {**os.environ, "TOKENIZERS_PARALLELISM": value}
    r = subprocess.run([sys.executable, "-c", FORK_WITH_TOKENIZERS_PARALLELISM, str(minilm_dir)], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == f"child 0 {value}", r.stderr[-2000:]
    assert "huggingface/tokenizers" not in r.stderr
