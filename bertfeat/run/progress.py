"""Progress on stderr: a rich bar in a terminal, plain periodic log lines otherwise, nothing with --quiet."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text


class NullProgress:
    """The progress interface both engines report to (and the sink of ``--quiet``); the CLI passes a rich or a
    plain-log implementation, Python callers any object with these methods."""

    def start(self, total_rows: int | None, total_bytes: int | None): ...
    def advance(self, rows: int, tokens: int, bytes_read: int): ...
    def note(self, message: str): ...
    def parts(self, done: int, in_flight: int, total: int): ...  # Dask: partitions finished / on workers now / in all
    def stop(self): ...


def _rate(n: float, dt: float) -> float:
    return n / dt if dt > 0 else 0.0


class _RatesColumn(ProgressColumn):
    def render(self, task) -> Text:
        f = task.fields
        dt = max(time.perf_counter() - f["t0"], 1e-9)
        return Text(f"{f['rows']:,} rows  {_rate(f['rows'], dt):,.0f} rows/s  {_rate(f['tokens'], dt):,.0f} tokens/s", style="cyan")


class RichProgress:
    """A rich progress bar on stderr: rows, rows/s, tokens/s and ETA (by rows for Parquet, bytes for text files)."""

    def __init__(self, console: Console, label: str = "extract"):
        self.console = console
        self.label = label
        self._p = None

    def start(self, total_rows, total_bytes):
        self._by_bytes = total_rows is None
        total = total_rows if total_rows is not None else total_bytes
        self._p = Progress(TextColumn("[bold]{task.description}"), BarColumn(), TaskProgressColumn(), _RatesColumn(),
                           TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=self.console, transient=False)
        self._p.start()
        self._task = self._p.add_task(self.label, total=total, rows=0, tokens=0, t0=time.perf_counter())

    def advance(self, rows, tokens, bytes_read):
        f = self._p.tasks[0].fields
        kw = {"rows": f["rows"] + rows, "tokens": f["tokens"] + tokens}
        if self._by_bytes:
            self._p.update(self._task, completed=bytes_read, **kw)
        else:
            self._p.update(self._task, advance=rows, **kw)

    def note(self, message):
        self.console.print(message, markup=False, highlight=False)

    def parts(self, done, in_flight, total):
        if self._p is not None:
            self._p.update(self._task, description=f"{self.label} {parts_text(done, in_flight, total)}")

    def stop(self):
        if self._p is not None:
            self._p.stop()
            self._p = None


class LogProgress:
    """Plain lines on stderr every ``every`` seconds, for logs and pipes."""

    def __init__(self, console: Console, every: float = 10.0, label: str = "extract"):
        self.console = console
        self.every = every
        self.label = label
        self._stopped = True  # nothing to report before start()

    def start(self, total_rows, total_bytes):
        self.total_rows, self.total_bytes = total_rows, total_bytes
        self.rows = self.tokens = self.bytes = 0
        self.t0 = self.last = time.perf_counter()
        self._reported = None
        self._parts = ""
        self._stopped = False
        size = f"{total_rows:,} rows" if total_rows is not None else (f"{total_bytes:,} bytes" if total_bytes else "unknown size")
        self._line(f"started ({size})")

    def _line(self, msg):
        self.console.print(f"bertfeat {self.label}: {msg}", markup=False, highlight=False, soft_wrap=True)

    def advance(self, rows, tokens, bytes_read):
        self.rows += rows
        self.tokens += tokens
        self.bytes = bytes_read or self.bytes
        now = time.perf_counter()
        if now - self.last >= self.every:
            self.last = now
            self._report(now)

    def _report(self, now):
        if self._reported == self.rows:  # nothing new since the last line
            return
        self._reported = self.rows
        dt = now - self.t0
        if self.total_rows:
            pct = f" ({100 * self.rows / self.total_rows:.1f}%)"
        elif self.total_bytes:
            pct = f" ({100 * self.bytes / self.total_bytes:.1f}% of bytes)"
        else:
            pct = ""
        self._line(f"{self.rows:,} rows{pct}, {_rate(self.rows, dt):,.0f} rows/s, {_rate(self.tokens, dt):,.0f} tokens/s, "
                   f"{dt:,.0f}s elapsed{self._parts}")

    def note(self, message):
        self._line(message)

    def parts(self, done, in_flight, total):
        self._parts = f", {parts_text(done, in_flight, total)}"

    def stop(self):
        if not self._stopped:
            self._stopped = True
            self._report(time.perf_counter())


def parts_text(done: int, in_flight: int, total: int) -> str:
    """The Dask engine's partitions: "3/16 parts done, 2 in flight" (in flight: on a worker, running or next in its queue)."""
    return f"{done}/{total} parts done, {in_flight} in flight"


def make_progress(console: Console, quiet: bool, label: str = "extract"):
    if quiet:
        return NullProgress()
    if console.is_terminal:
        return RichProgress(console, label)
    return LogProgress(console, label=label)
