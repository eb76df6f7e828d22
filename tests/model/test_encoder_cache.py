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
