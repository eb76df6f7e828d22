"""The Dask engine's client side of a cluster: start or join one, size the work to it, gather the results.

``open_client`` joins a scheduler or starts a LocalCluster (one worker process with a thread per core by default;
measured fastest); ``worker_threads`` / ``cluster_slots`` size the partitions and the encoder threads to the workers
that joined; ``gather`` collects task results as they finish, turning a task's error into the run's error and
reporting progress; ``cancel`` drops the rest. dask.py holds the job.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import struct
import time

from ..errors import BertfeatError, opt

#: the loggers distributed gives a stderr handler when it is imported (distributed/config.py), and asyncio's (a task's
#: error never retrieved, a connection closing at shutdown)
LOGGERS = ("distributed", "distributed.client", "distributed.gc", "tornado", "tornado.application", "bokeh", "asyncio")
#: seconds a scheduler has to greet a new connection: Dask's server sends its handshake at once (measured: within
#: microseconds on loopback), while distributed's client waits for it without a time limit
GREETING_TIMEOUT = 5.0
#: what bertfeat sends a server that stays silent, to learn what it is: an HTTP server answers it with its status line
PROBE_REQUEST = b"HEAD / HTTP/1.0\r\n\r\n"


class ClusterError(BertfeatError):
    """The cluster failed the run (a worker killed, tasks cancelled): the finished partitions stay for --resume (none
    finished: nothing stays, and --resume starts over)."""


class TaskFailed:
    """A task's BertfeatError (a bad row, a model the worker cannot load), returned instead of raised: a raised one is
    logged by the worker as "Compute Failed" with its traceback before the client says it in one line."""

    def __init__(self, error: BertfeatError):
        self.error = error


def run_task(fn, *args):
    """Run ``fn(*args)`` on a worker (the Dask engine submits every task through this); see TaskFailed."""
    try:
        return fn(*args)
    except BertfeatError as e:
        return TaskFailed(e)


@contextlib.contextmanager
def routed_logs(restore: bool = True):
    """While a command line runs the Dask engine, distributed's log records (and tornado's and asyncio's under it) are
    dropped instead of printed: a scheduler that goes away mid-run, or connections closing as the client shuts down,
    would print their tracebacks above the run's one ``Error:`` line, which says what happened (gather names a lost
    scheduler; ``bertfeat --debug`` keeps the log). The handlers are put back after, unless not ``restore`` (the
    process exits next: a cluster a stop left closing logs its shutdown there, below the run's last line)."""
    try:
        import distributed  # noqa: F401 - its import installs the stderr handlers set aside here
    except ImportError:  # the plan says how to install it
        yield
        return
    saved = []
    for name in LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.handlers[:], logger.propagate))
        logger.handlers, logger.propagate = [logging.NullHandler()], False
    try:
        yield
    finally:
        for logger, handlers, propagate in saved if restore else ():
            logger.handlers, logger.propagate = handlers, propagate


def open_client(dask, scripted: bool = False):
    """The plan's cluster (plan.DaskSettings): -> (client, the LocalCluster we started or None). ``scripted``: run
    from Python (bertfeat.extract), not the command line: a local cluster's workers import the script."""
    import logging

    from distributed import Client, LocalCluster

    if dask.scheduler:
        check_scheduler(dask.scheduler)
        try:
            client = Client(dask.scheduler, timeout=30)
        except ValueError as e:  # "127.0.0.1:notaport": distributed parses it before it connects
            raise BertfeatError(f"{opt('scheduler', dask.scheduler)} is not a scheduler address ({e})",
                                "give tcp://HOST:PORT, e.g. tcp://10.0.0.5:8786") from None
        except (OSError, TimeoutError) as e:
            raise BertfeatError(f"cannot reach the Dask scheduler at {dask.scheduler} ({e})",
                                "start it with `dask scheduler` and the workers with `dask worker tcp://HOST:8786`") from None
        return client, None
    from ..ops.threads import default_threads

    # Default: one worker process with a thread per core. Measured (benchmarks/DASK_RESULTS.md, 2 cores,
    # 6,000 rows): 1 x 2 threads ran level with the local engine (1.00x), 2 x 1 thread at 0.86x (two
    # model copies, two processes' worth of Python overhead); --workers N asks for N one-thread processes.
    n = int(dask.workers or 1)
    per_worker = 1 if dask.workers else default_threads()
    # worker processes load NumPy before bertfeat: hand them this process's BLAS kernel choice
    # (bertfeat/ops/threads.py), or they run OpenBLAS's older kernels wherever the environment pins them
    from ..ops.threads import blas_info

    kernel = blas_info().get("architecture")
    env = {"OPENBLAS_CORETYPE": kernel} if kernel and blas_info().get("internal_api") == "openblas" else {}
    import dask

    # The workers' statistical profiler samples every thread's stack every 10 ms, with the GIL: off in the
    # cluster we start (measured 2 %: 2 one-thread workers 0.91x -> 0.93x the local engine, 8,000 rows, 2
    # rounds). The Nanny hands this config to its worker process; an env= variable comes too late for it.
    with dask.config.set({"distributed.worker.profile.enabled": False}):
        try:
            cluster = start_local_cluster(LocalCluster, n_workers=n, threads_per_worker=per_worker, processes=True,
                                          dashboard_address=":0", silence_logs=logging.ERROR, env=env,
                                          preload=[__name__])  # dask_setup below, in each worker process
        except RuntimeError as e:  # the worker processes' own errors went to their stderr
            if "Nanny failed to start" not in str(e):
                raise
            from .options import MAIN_GUARD_FIX

            fix = ("see the workers' error above, if one printed it (a memory limit, a package the workers cannot "
                   "import ...); none: a worker process was killed as it started (out of memory?)")
            raise BertfeatError(f"the local Dask cluster's worker processes failed to start ({str(e).rstrip('.')}; "
                                "a worker's own error, if it printed one, is above)",
                                f"from a Python script, {MAIN_GUARD_FIX}; else {fix}" if scripted else fix) from None
    try:
        return Client(cluster), cluster
    except BaseException:  # a Ctrl-C as the client connects: the cluster is the run's to close
        close_cluster(None, cluster)
        raise


def dask_setup(worker) -> None:
    """Run in each worker process of the cluster bertfeat starts (distributed's ``preload``): Ctrl-C sends SIGINT to
    the whole process group, and each worker's own KeyboardInterrupt printed ~30 lines of traceback below the run's
    one line. The workers ignore it; the client's stop closes them (DaskRun.failed, then close_cluster)."""
    import threading

    if threading.current_thread() is threading.main_thread():  # signal handlers are set from the main thread only
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    quiet_heartbeat_failures()


#: what a worker logs, with 40 lines of traceback, when its scheduler closes under a heartbeat in flight: as the
#: client's stop closes the cluster (below its one Interrupted line), or when the scheduler is lost (which the client's
#: own error names)
HEARTBEAT_FAILED = "Failed to communicate with scheduler during heartbeat"


def quiet_heartbeat_failures() -> None:
    """Drop the worker logger's HEARTBEAT_FAILED records in this process (a worker of the cluster bertfeat starts)."""
    logging.getLogger("distributed.worker").addFilter(lambda r: not str(r.msg).startswith(HEARTBEAT_FAILED))


def start_local_cluster(make, **kw):
    """``make(**kw)`` (a LocalCluster). One stopped while it starts (Ctrl-C, SIGTERM: its workers still starting) is
    closed here and forgotten: left to distributed's own closing at exit, it failed with a traceback
    (``AssertionError: Status.init``) below the run's ``Interrupted`` line."""
    from distributed.deploy.spec import SpecCluster

    started = getattr(SpecCluster, "_instances", None)  # distributed's registry of clusters it closes at exit
    before = set(started) if started is not None else set()
    try:
        return make(**kw)
    except BaseException:
        for cluster in (set(started) - before) if started is not None else ():
            _close_interrupted(cluster)
            started.discard(cluster)
        raise


def _close_interrupted(cluster) -> None:
    """Close a cluster whose start was interrupted (what closes, closes), and stop its worker processes still
    running."""
    procs = _worker_processes(cluster)  # before the close, which forgets its workers
    with contextlib.suppress(Exception):
        cluster.close(timeout=10)
    _stop(procs)


def _worker_processes(cluster) -> list:
    """The worker processes of a cluster's Nannies (distributed's AsyncProcess handles)."""
    nannies = list(getattr(cluster, "_created", ())) + list(getattr(cluster, "workers", {}).values())
    procs = (getattr(getattr(w, "process", None), "process", None) for w in nannies)
    return list({id(p): p for p in procs if p is not None}.values())


def _stop(procs: list, wait: float = 5.0) -> None:
    """Stop the worker processes still running (a Nanny stopped in its start may leave its process)."""
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        with contextlib.suppress(OSError, TypeError):
            os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while any(p.is_alive() for p in alive) and time.monotonic() < deadline:
        time.sleep(0.02)


def check_scheduler(address: str, timeout: float = GREETING_TIMEOUT) -> None:
    """Refuse a ``tcp://`` address where something other than a Dask scheduler listens, in ``timeout`` seconds or two.

    distributed's client reads the server's handshake without a time limit: a server that accepts and stays silent
    (a web server waiting for a request) hangs it for good, and one that sends other bytes makes it read their first
    eight as a message length (a MemoryError). A Dask scheduler greets each connection at once with a message (an
    8-byte length, then its frame count), so this connects, reads what comes, and names it in the error; a server
    that stays silent is sent PROBE_REQUEST to learn what it is. Nothing listening (refused, unreachable) passes:
    Client retries that for its own timeout (a scheduler may be starting) and says so. Other schemes (tls://) pass.
    """
    try:
        from distributed.comm.addressing import parse_address, parse_host_port

        scheme, location = parse_address(address)
        host, port = parse_host_port(location)
    except (TypeError, ValueError):
        return  # Client parses it again and says what is wrong
    if scheme != "tcp":
        return
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError:
        return
    with sock:
        data = _read_some(sock, timeout)
        if data == b"":
            sock.sendall(PROBE_REQUEST)
            data = _read_some(sock, timeout)
    if _greets_as_dask(data):
        return
    said = ("closed the connection without a word" if data is None else
            f"accepted the connection but sent nothing in {2 * timeout:.0f} s" if not data else
            f"sent {_shown(data)}")
    raise BertfeatError(f"{opt('scheduler', address)} answered but is not a Dask scheduler (it {said})",
                        "check the host and port: a Dask scheduler listens on 8786 by default (`dask scheduler`), its "
                        "dashboard on 8787 is a web page, not the scheduler")


def _read_some(sock, timeout: float) -> bytes | None:
    """The first bytes the peer sends within ``timeout`` (up to 16, a Dask message's header): b"" when it sent
    nothing, None when it closed the connection before sending anything."""
    data, deadline = b"", time.monotonic() + timeout
    while len(data) < 16:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            chunk = sock.recv(4096)
        except socket.timeout:
            break
        except OSError:  # reset by the peer
            return data or None
        if not chunk:
            return data or None
        data += chunk
    return data


def _greets_as_dask(data: bytes | None) -> bool:
    """A Dask message's start: its length (8 bytes, little-endian) and frame count, both of a sane size."""
    if not data or len(data) < 16:
        return False
    length, frames = struct.unpack("<QQ", data[:16])
    return 1 <= frames <= 1024 and 8 + 8 * frames <= length < 1 << 30


def _shown(data: bytes) -> str:
    """The first line of what a server sent, as a short quoted text: 'HTTP/1.0 400 Bad Request'."""
    line = data.split(b"\n", 1)[0].rstrip(b"\r")[:60]
    return repr(line)[1:] + ("..." if len(line) < len(data.rstrip(b"\r\n")) else "")


def worker_threads(client, address: str = "", timeout: float = 120.0) -> dict[str, int]:
    """Encoder threads per task, for each worker (by address): its host's cores shared by the task slots (worker
    processes x --nthreads) on that host, so that no host is oversubscribed and none left idle; waits for a first
    worker. A worker that joins later takes the smallest share (task_threads)."""
    from ..ops.threads import default_threads

    if not client.scheduler_info(n_workers=-1)["workers"]:
        try:
            client.wait_for_workers(1, timeout=timeout)
        except TimeoutError:
            raise BertfeatError(f"no Dask worker joined the scheduler {address} in {timeout:.0f} s",
                                f"start workers with `dask worker {address or 'tcp://HOST:8786'}` on each machine") from None
    workers = client.scheduler_info(n_workers=-1)["workers"]
    cores = client.run(default_threads)
    slots: dict[str, int] = {}
    for addr, w in workers.items():
        slots[w.get("host", addr)] = slots.get(w.get("host", addr), 0) + int(w.get("nthreads", 1) or 1)
    return {a: max(1, cores[a] // slots[w.get("host", a)]) for a, w in workers.items() if a in cores} or {"": 1}


def _this_worker():
    """The Dask worker running this task (None outside one)."""
    try:
        from distributed import get_worker

        return get_worker()
    except (ImportError, ValueError):
        return None


def task_threads(threads: int | dict | None, worker=None) -> int | None:
    """This worker's encoder threads from worker_threads' dict (or the one number --threads gave)."""
    if not isinstance(threads, dict):
        return threads
    worker = worker or _this_worker()
    return threads.get(getattr(worker, "address", ""), min(threads.values()))


def task_slots(worker=None) -> int:
    """Tasks this worker runs side by side (its --nthreads; 1 outside a worker)."""
    worker = worker or _this_worker()
    state = getattr(worker, "state", worker)
    return max(1, int(getattr(state, "nthreads", None) or getattr(worker, "nthreads", 1) or 1))


def cluster_slots(client) -> int:
    """Task slots of the cluster: the worker threads of every worker now connected."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    return max(1, sum(int(w.get("nthreads", 1) or 1) for w in workers.values()))


def in_flight(client, futures: dict) -> int:
    """How many of these tasks are in flight: on a worker, running or next in its queue (the scheduler's
    view; 0 if it cannot say)."""
    keys = {f.key for f in futures if not f.done()}
    try:
        return sum(1 for ks in client.processing().values() for k in ks if k in keys)
    except Exception:  # pragma: no cover - a scheduler going away: the next result says so
        return 0


def gather(client, futures: dict, on_result, progress=None, *, counted=None, done: int = 0, total: int | None = None):
    """Gather futures as they finish; a task's error (raised, or returned as TaskFailed) becomes the run's error.
    With ``progress`` (an object with a ``parts`` method), report the partitions done and in flight after each one:
    ``counted(key)`` says which tasks are partitions (default all), ``done`` were finished before, of ``total``."""
    from distributed import as_completed
    from distributed.client import FutureCancelledError

    try:
        from distributed.scheduler import KilledWorker
    except ImportError:  # pragma: no cover
        KilledWorker = ()  # type: ignore
    show = getattr(progress, "parts", None)
    counted = counted or (lambda key: True)
    parts = {f: k for f, k in futures.items() if counted(k)}
    total = done + len(parts) if total is None else total
    if show is not None:
        show(done, in_flight(client, parts), total)
    # the client's own loop: as_completed's default is the default client's, and a client that lost its scheduler
    # closes itself (there is none then: "ValueError: No clients found")
    for fut in as_completed(list(futures), loop=client.loop):
        key = futures[fut]
        try:
            res = fut.result()
        except KilledWorker as e:
            raise ClusterError(f"partition {key}: its task killed the workers that ran it ({e})",
                                f"a worker probably ran out of memory: rerun with {opt('resume', True)} and a lower "
                                f"{opt('max_batch_tokens')} (it reuses the partitions that finished), or give the workers more "
                                f"memory; a lower {opt('blocksize')} cuts the input anew, so it needs "
                                f"{opt('overwrite', True)} (the run starts over)") from None
        except FutureCancelledError as e:
            raise cancelled_error(key, e, client) from None
        if isinstance(res, TaskFailed):
            raise res.error
        on_result(key, res)
        fut.release()
        if show is not None and counted(key):
            done += 1
            show(done, in_flight(client, parts), total)


def cancelled_error(key, e, client) -> ClusterError:
    """A partition's task cancelled under the run: the client lost its scheduler, or the cluster cancelled it."""
    reason = getattr(e, "reason", None) or "unknown"
    if reason == "scheduler-connection-lost":
        where = scheduler_address(client) or "the scheduler"
        return ClusterError(f"partition {key}: the connection to the Dask scheduler {where} was lost (the scheduler "
                            "stopped, or the network between it and this machine failed)",
                            f"restart the scheduler and its workers, then rerun with {opt('resume', True)} (it "
                            "reuses the partitions that finished)")
    return ClusterError(f"partition {key}: the task was cancelled (reason: {reason})",
                        f"rerun with {opt('resume', True)} (it reuses the partitions that finished)")


def scheduler_address(client) -> str | None:
    """The client's scheduler address: its live connection's, else the one it was started with (the live rpc object
    may have dropped it once the connection is lost: seen under load), else its cluster's; None when none is known."""
    live = getattr(getattr(client, "scheduler", None), "address", None)
    start = getattr(client, "_start_arg", None)
    return live or (start if isinstance(start, str) else getattr(getattr(client, "cluster", None), "scheduler_address", None))


def close_cluster(client, cluster=None) -> None:
    """Close the client, then the LocalCluster we started. A client that lost its scheduler can fail to close
    (distributed's reconnect changes its futures while close walks them: "dictionary changed size during
    iteration"); that must not hide the run's own error or result."""
    for part in (client, cluster):
        try:
            if part is not None:
                part.close()
        except Exception:  # noqa: BLE001 - cleanup of a cluster that is gone
            pass


def cancel(client, futures):
    if client is not None and futures:
        try:
            client.cancel(list(futures))
        except Exception:  # pragma: no cover - the client may already be gone
            pass
