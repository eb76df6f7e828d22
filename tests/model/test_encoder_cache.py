"""encoder_cache: one loaded Encoder per model files and settings per process, reloaded when a file changes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

from bertfeat.model.encoder_cache import clear, shared_encoder


def test_the_same_model_and_settings_share_one_encoder(minilm_dir, tmp_path):
    clear()
    a = shared_encoder(str(minilm_dir))
    assert shared_encoder(str(minilm_dir)) is a
    assert shared_encoder(str(minilm_dir), max_batch_tokens=128) is not a  # another load setting: another Encoder


def test_an_edited_module_folder_loads_again(minilm_dir, tmp_path):
    """A sentence-transformers Pooling config edited on disk (a subfolder, not the top level) is seen."""
    clear()
    d = tmp_path / "m"
    shutil.copytree(minilm_dir, d)
    a = shared_encoder(str(d))
    cfg = d / "1_Pooling" / "config.json"
    data = json.loads(cfg.read_text())
    data["pooling_mode_mean_tokens"], data["pooling_mode_cls_token"] = False, True
    cfg.write_text(json.dumps(data))
    os.utime(cfg, ns=(cfg.stat().st_atime_ns, cfg.stat().st_mtime_ns + 10**9))
    b = shared_encoder(str(d))
    assert b is not a and b.default_pooling == "cls" and a.default_pooling == "mean"


def test_two_threads_asking_for_one_model_load_it_once(minilm_dir, monkeypatch):
    """Two threads asking at once for a model not loaded yet: one Encoder is built, both get it."""
    import threading

    from bertfeat.model import encoder as encoder_module

    clear()
    built, real_init, barrier = [], encoder_module.Encoder.__init__, threading.Barrier(2)

    def counted(self, *a, **k):
        built.append(1)
        real_init(self, *a, **k)

    monkeypatch.setattr(encoder_module.Encoder, "__init__", counted)
    got = [None, None]

    def ask(i):
        barrier.wait(30)
        got[i] = shared_encoder(str(minilm_dir))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(built) == 1 and got[0] is got[1] is not None


def test_two_models_load_side_by_side(minilm_dir, tmp_path, monkeypatch):
    """A thread loading one model does not hold up a thread asking for another (one lock for every load made a
    server's second model wait for the first's load)."""
    import threading

    from bertfeat.model import encoder as encoder_module

    clear()
    other = tmp_path / "other"
    shutil.copytree(minilm_dir, other)
    real_init, first_started, second_done = encoder_module.Encoder.__init__, threading.Event(), threading.Event()

    def slow_first(self, *a, **k):
        if str(k["location"].path) == str(minilm_dir):
            first_started.set()
            assert second_done.wait(20), "the second model waited for the first's load"
        real_init(self, *a, **k)

    monkeypatch.setattr(encoder_module.Encoder, "__init__", slow_first)
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("a", shared_encoder(str(minilm_dir))))
    t.start()
    assert first_started.wait(60)
    got["b"] = shared_encoder(str(other))
    second_done.set()
    t.join(120)
    assert got["a"] is not got["b"] and got["a"] is shared_encoder(str(minilm_dir))


def test_after_a_failed_load_one_model_still_loads_once_at_a_time(minilm_dir, monkeypatch):
    """A load fails while a second thread waits for it: the waiter loads the model itself, and a third thread asking
    meanwhile waits for that load. The failed load dropped the key's lock though the waiter held it, so the third
    thread took a new lock and loaded the same model beside it (two copies in memory, one thrown away)."""
    import threading
    import time

    from bertfeat.errors import BertfeatError
    from bertfeat.model import encoder as encoder_module

    clear()
    real_init = encoder_module.Encoder.__init__
    first_in, fail_first, second_in, finish_second = (threading.Event() for _ in range(4))
    calls = []

    def scripted(self, *a, **k):
        calls.append(len(calls))
        if len(calls) == 1:  # the first load: fails once the second thread waits for it
            first_in.set()
            assert fail_first.wait(30)
            raise BertfeatError("the first load failed", "nothing")
        if len(calls) == 2:  # the waiter's load: held while a third thread asks
            second_in.set()
            assert finish_second.wait(30)
        real_init(self, *a, **k)

    monkeypatch.setattr(encoder_module.Encoder, "__init__", scripted)
    got, errors = {}, []

    def ask(name):
        try:
            got[name] = shared_encoder(str(minilm_dir))
        except BertfeatError as e:
            errors.append(str(e))

    a = threading.Thread(target=ask, args=("a",))
    a.start()
    assert first_in.wait(30)
    b = threading.Thread(target=ask, args=("b",))
    b.start()
    time.sleep(0.5)  # b waits for a's load
    fail_first.set()
    assert second_in.wait(30)
    c = threading.Thread(target=ask, args=("c",))
    c.start()
    time.sleep(0.5)  # c asks while b loads
    loads_meanwhile = len(calls)
    finish_second.set()
    for t in (a, b, c):
        t.join(120)
    assert errors == ["the first load failed - nothing"]
    assert loads_meanwhile == 2 and len(calls) == 2
    assert got["b"] is got["c"] is shared_encoder(str(minilm_dir))


FORK_WHILE_LOADING = textwrap.dedent("""
    import faulthandler, os, sys, threading, time
    from bertfeat.model import encoder as em, encoder_cache

    real_init, loading = em.Encoder.__init__, threading.Event()

    def slow(self, *a, **k):  # the cache lock is held while this runs
        loading.set()
        time.sleep(2)
        real_init(self, *a, **k)

    em.Encoder.__init__ = slow
    th = threading.Thread(target=encoder_cache.shared_encoder, args=(sys.argv[1],))
    th.start()
    loading.wait()
    pid = os.fork()
    if pid == 0:
        faulthandler.dump_traceback_later(60, exit=True)  # a deadlock: exit 1 with the stack
        em.Encoder.__init__ = real_init
        os._exit(0 if encoder_cache.shared_encoder(sys.argv[1]).encode(["hello"]).shape == (1, 384) else 3)
    th.join()
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status))
""")


def test_fork_while_another_thread_loads_a_model(minilm_dir):
    """A child forked while another thread loaded a model (the cache's lock held) loads its own (it waited forever
    on that lock, whose holder is gone in the child)."""
    r = subprocess.run([sys.executable, "-c", FORK_WHILE_LOADING, str(minilm_dir)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "child 0", r.stderr[-2000:]
