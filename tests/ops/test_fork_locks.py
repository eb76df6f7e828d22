"""A process forked while another thread held the ops layer's locks (choosing the kernel backend, warming a
precision's kernels, loading oneDNN: an Encoder loading) is usable in the child.

Each case runs in a subprocess with a timeout (a deadlock fails the test, never hangs the suite)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

FORK_WHILE_HELD = textwrap.dedent("""
    import faulthandler, os, threading, time
    from bertfeat.ops import kernels, onednn

    held = threading.Event()

    def hold():  # as a thread in the middle of kernels.use / _warm_once and onednn._load when the main thread forks
        with kernels._first, kernels._lock, onednn._lock:
            held.set()
            time.sleep(3)

    threading.Thread(target=hold, daemon=True).start()
    held.wait()
    pid = os.fork()
    if pid == 0:
        faulthandler.dump_traceback_later(40, exit=True)  # a deadlock: exit 1 with the stack
        kernels.backend()
        kernels.warm_bf16()
        onednn.available()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status))
""")


def test_fork_while_another_thread_holds_the_kernel_and_onednn_locks():
    """The child chooses its backend, warms its kernels and loads oneDNN (it waited forever on the locks of a thread
    gone in the child)."""
    r = subprocess.run([sys.executable, "-c", FORK_WHILE_HELD], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "child 0", r.stderr[-2000:]
