"""What a command writes and the rules it must pass before it writes anything: no output or side file may be an
input (compared through symbolic and hard links), a file of the model folder or the vector cache
(``check_not_runs_own``) or an existing directory, an existing output is refused unless
``overwrite`` (``check_outputs``, ``check_not_input``, ``check_overwrite``, ``check_not_directory``), a directory
output (the Dask engine's, replaced whole) holds only what bertfeat wrote there and a file browser's files
(``check_dataset_directory``, ``browser_file``), and a
partial run in the way is named (``partial_run_error``). ``feature_file_outputs`` / ``feature_file_inputs`` /
``report_outputs`` list a feature file's or a PCA report's files with their side files.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable, Mapping

from ..errors import OutputError, opt, opt_word


def _same_file(a: Path, b: Path) -> bool:
    """a and b name the same file: the same resolved path (symbolic links), or the same inode (hard links)."""
    try:
        if a.resolve() == b.resolve():
            return True
    except (OSError, RuntimeError):
        pass
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _inside(a: Path, d: Path) -> bool:
    """a lies inside the directory d (e.g. an input inside an OUTPUT.partial directory)."""
    try:
        return d.resolve() in a.resolve().parents
    except (OSError, RuntimeError):
        return False


def _named_by(label: str, options: Mapping[str, str] | None) -> str:
    """The option that names the output ``label`` in a fix: ``options[label]`` (a parameter name), else output."""
    return opt((options or {}).get(label, "output"))


def check_not_input(outputs: Iterable[tuple[str, Path]], inputs: Iterable[Path],
                    options: Mapping[str, str] | None = None) -> None:
    """Refuse when an output or side file (label, path) names an input, or a directory holding one, or lies inside
    an input directory (a Parquet dataset: a file written there becomes one of its parts)."""
    inputs = [Path(p) for p in inputs if p is not None and str(p) != "-"]
    for label, out in outputs:
        out = Path(out)
        for inp in inputs:
            if _same_file(out, inp) or _inside(inp, out):
                raise OutputError(f"the {label} {out} would replace the input {inp}",
                                  f"pass {_named_by(label, options)} with another name, or rename the input")
            if inp.is_dir() and _inside(out, inp):
                raise OutputError(f"the {label} {out} is inside the input directory {inp}, whose files are read as "
                                  "one dataset", f"pass {_named_by(label, options)} with a path outside it")


def runs_own_folder(path: str | os.PathLike, model=None, cache=None) -> str | None:
    """What a path a run writes would be written inside, when it lies inside the model folder (``model``, when it is a
    local directory: a hub id is not) or the vector cache directory (``cache``, made or not yet: the run makes its
    database before it writes its outputs), e.g. ``"the vector cache cX"``; else None. The one rule for every file
    ``extract`` writes (its outputs, side files and partial directory: plan.py; ``--summary-json``: the CLI)."""
    where = Path(os.path.realpath(path))
    for what, folder, must_exist in (("the model folder", model, True), ("the vector cache", cache, False)):
        if folder is None or folder is False or (must_exist and not Path(folder).is_dir()):
            continue
        if isinstance(folder, str) and not folder.strip():  # names no folder (Path("") is the current directory):
            continue  # the model's load refuses it as empty, in its own words
        if Path(os.path.realpath(folder)) in where.parents:
            return f"{what} {folder}"
    return None


def check_cache_outside_model(cache, model=None) -> None:
    """Refuse a vector cache that is the model folder or inside it (its database would be written among the model's
    files), as an output there is refused (``runs_own_folder``)."""
    if cache is None or cache is False:
        return
    from ..cache.store import DB_NAME, CacheError  # (CacheError: so that one BERTFEAT_CACHE named says so: run.api)

    if runs_own_folder(Path(cache) / DB_NAME, model) is not None:  # its database among the model's files
        inside = os.path.realpath(cache) != os.path.realpath(model)
        raise CacheError(f"the cache {cache} is {'inside ' if inside else ''}the model folder {model}",
                         f"give {opt('cache')} a directory of its own, e.g. {opt('cache', 'bertfeat-cache')}")


def check_not_runs_own(outputs: Iterable[tuple[str, Path]], model=None, cache=None,
                       options: Mapping[str, str] | None = None) -> None:
    """Refuse an output or side file (label, path) inside the model folder or the vector cache (``runs_own_folder``):
    ``-o cache/vectors.sqlite3 --overwrite`` replaced the cache's database."""
    for label, out in outputs:
        owner = runs_own_folder(out, model, cache)
        if owner is not None:
            raise OutputError(f"the {label} {out} would be written inside {owner}",
                              f"pass {_named_by(label, options)} with a path outside it")


def file_kind(path: Path) -> str | None:
    """What a path is when it is neither absent, a regular file nor a directory ("a named pipe (FIFO)", ...)."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    for test, name in ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return None


#: a path that names a file descriptor of the process opening it (what /dev/stdout and /dev/fd/N link to)
_FD_PATH = re.compile(r"/proc/(?:self|thread-self|\d+)(?:/task/\d+)?/fd/(\d+)")
_STANDARD = {0: "standard input", 1: "standard output", 2: "standard error"}


def descriptor_named(path: str | os.PathLike) -> int | None:
    """The file descriptor ``path`` names through /proc/self/fd (``/dev/stdout``, ``/dev/fd/1``, ``/proc/self/fd/1``,
    a link to one of them), else None: such a path is no file of its own, whatever its descriptor is open on."""
    p = os.fspath(path)
    for _ in range(40):  # a link to a link, as the system follows them
        p = os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(p))), os.path.basename(p))
        m = _FD_PATH.fullmatch(p)
        if m:
            return int(m.group(1))
        try:
            target = os.readlink(p)
        except OSError:
            return None
        p = os.path.join(os.path.dirname(p), target)
    return None


def check_not_descriptor(outputs: Iterable[tuple[str, Path]], options: Mapping[str, str] | None = None) -> None:
    """Refuse an output (label, path) that names a file descriptor (``descriptor_named``: /dev/stdout ...): redirected
    to a file it passed as one, and the rename of the atomic write replaced the link itself (as root, /dev/stdout
    became a regular file for every later process; the redirected file stayed empty)."""
    for label, out in outputs:
        fd = descriptor_named(out)
        if fd is not None:
            named = _named_by(label, options)
            dash = f", or {named} - for standard output" if (options or {}).get(label) == "summary_json" else ""
            what = f"{_STANDARD[fd]} (file descriptor {fd})" if fd in _STANDARD else f"file descriptor {fd} of the process"
            raise OutputError(f"the {label} {out} is {what}, not a file", "bertfeat writes regular files (atomically: a "
                              f"temporary file, then a rename, which would replace {out} itself); pass {named} with a "
                              f"file name{dash}")


def check_regular(outputs: Iterable[tuple[str, Path]], options: Mapping[str, str] | None = None) -> None:
    """Refuse an output (label, path) that is not a regular file: a file descriptor's name (/dev/stdout), a device, a
    FIFO, whatever the flags."""
    outputs = [(label, Path(out)) for label, out in outputs]
    check_not_descriptor(outputs, options)
    for label, out in outputs:
        kind = file_kind(out)
        if kind is not None:
            raise OutputError(f"the {label} {out} is {kind}, not a regular file",
                              f"bertfeat writes regular files (atomically: a temporary file, then a rename); pass "
                              f"{_named_by(label, options)} with a file name")


def check_overwrite(outputs: Iterable[tuple[str, Path]], overwrite: bool,
                    options: Mapping[str, str] | None = None, resumed: Path | None = None) -> None:
    """Refuse an output that is not a regular file (a FIFO, a device, a file descriptor's name such as /dev/stdout:
    whatever the flags), and an existing output unless ``overwrite``. ``resumed``: the partial directory of the
    interrupted run a resume continues: the outputs it may replace (``replaceable_outputs``) may exist."""
    outputs = [(label, Path(out)) for label, out in outputs]
    check_regular(outputs, options)
    if overwrite:
        return
    left = set() if resumed is None else replaceable_outputs(resumed)
    also = f" beside {opt('resume', True)} (the finished chunks are still kept)" if resumed is not None else ""
    for label, out in outputs:
        if os.path.abspath(out) in left:
            continue
        if out.is_symlink():  # the rename replaces the link, not the file it points to: said before --overwrite
            raise OutputError(f"{out} already exists: {_link_words(out)}",
                              f"pass {opt('overwrite', True)}{also} to replace the link itself with the new file (the "
                              f"file it points to is not written), or {_named_by(label, options)} with another name")
        if out.exists():
            why = ", and the interrupted run did not write it" if resumed is not None else ""
            raise OutputError(f"{out} already exists{why}", f"pass {opt('overwrite', True)}{also} to replace it, or "
                              f"{_named_by(label, options)} with another name")


#: in OUTPUT.partial/: the outputs the partial run may replace when resumed without --overwrite: all of them when it
#: was started with --overwrite (the user asked), else those its finish put in place (written before the first moves)
REPLACEABLE = ".replaceable.json"


def allow_replacing(partial: Path, outputs: Iterable[tuple[str, Path]]) -> None:
    """Record ``outputs`` (REPLACEABLE) as ones a resume of this partial run may replace."""
    import json

    from ..atomic import write_atomic

    write_atomic(partial / REPLACEABLE, json.dumps(sorted(os.path.abspath(p) for _, p in outputs)))


def mark_finishing(partial: Path, outputs: Iterable[tuple[str, Path]]) -> None:
    """Inside atomic.together(), before any output is committed: REPLACEABLE lists them, written first among the final
    moves, so that a kill among those moves resumes without --overwrite."""
    from ..atomic import deferred

    outputs = list(outputs)
    deferred(lambda: allow_replacing(partial, outputs))


def replaceable_outputs(partial: Path) -> set[str]:
    """The outputs (absolute paths) a resume of the partial run may replace (REPLACEABLE), else none."""
    import json

    try:
        names = json.loads((partial / REPLACEABLE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()


def _link_words(link: Path) -> str:
    """'a symbolic link to T' (', which does not exist' when T is missing) for a refusal of an existing output."""
    try:
        target = os.readlink(link)
    except OSError:
        return "a symbolic link"
    return f"a symbolic link to {target}" + ("" if link.exists() else ", which does not exist")


def check_outputs(outputs: Iterable[tuple[str, Path]], inputs: Iterable[Path], overwrite: bool = False,
                  existing: Iterable[tuple[str, Path]] | None = None, options: Mapping[str, str] | None = None) -> None:
    """Both checks, before anything is written. ``existing`` (default: all outputs) are the files whose
    existence needs --overwrite (a file a run removes when it is not needed, e.g. a stale rejects file, is not).
    ``options``: label -> the parameter of the option that gives that output, as the fixes name it (attention's
    ``{"--save-npy file": "save_npy"}``); an output not in it is ``output``'s (``-o``)."""
    outputs = [(label, Path(p)) for label, p in outputs if p is not None]
    check_not_input(outputs, inputs, options)
    check_not_directory(outputs, options)
    check_overwrite(outputs if existing is None else existing, overwrite, options)


def check_name_lengths(outputs: list[tuple[str, Path]]) -> None:
    """Every name a run writes fits the file system's name limit: a name too long fails the same way on every rerun,
    so it is refused before anything is written, saying how many bytes to cut from the output's name. The names
    bertfeat derives for its own use (temporaries, locks, the partial run's folder, extract's rejects file, named in
    its summary) are shortened to fit instead (``atomic.fitted_name``): a name the user opens (a .npy's ids file, a
    provenance file, a PCA model or report, a sweep report) is refused. extract, pca fit / transform, report and
    sweep call it. On a file system of a lower limit than the 255 bytes that shortening assumes (eCryptfs: 143), the
    names bertfeat derives are not shortened to fit it: there the name leaves room for them (``atomic.ASIDE_ROOM``),
    as every name had to before, else its run would fail at its end, writing its first file."""
    from ..atomic import ASIDE_ROOM, NAME_MAX

    over = []  # (bytes past the limit, limit, label, path, room): the one furthest past it is named, its cut fixes all
    for label, path in outputs:
        try:
            limit = os.pathconf(path.parent if str(path.parent) else ".", "PC_NAME_MAX")
        except (OSError, ValueError):
            continue  # no such folder (its own check says so) or no limit known
        room = ASIDE_ROOM if limit < NAME_MAX else 0
        size = len(path.name.encode("utf-8", "surrogateescape")) + room
        if size > limit:
            over.append((size - limit, limit, label, path, room))
    if over:
        cut, limit, label, path, room = max(over, key=lambda o: o[0])
        derived = f" with the {room} its temporary name .NAME.tmp-PID adds" if room else ""
        raise OutputError(f"the {label} name {path.name!r} is too long for its file system ({cut + limit:,} bytes"
                          f"{derived}; the limit is {limit})",
                          f"choose an output name at least {cut:,} byte{'s' * (cut != 1)} shorter with {opt('output')}")


def check_not_directory(outputs: Iterable[tuple[str, Path]], options: Mapping[str, str] | None = None,
                        side_files: bool = False) -> None:
    """Refuse an output file that names an existing directory, --overwrite or not (a file never replaces one).
    ``side_files``: files named after the output (its rejects file, PCA files): the fix is to move the directory."""
    for label, out in outputs:
        if Path(out).is_dir():
            named = _named_by(label, options)
            raise OutputError(f"the {label} {out} is a directory",
                              f"move or rename that directory, or pass {named} with another name" if side_files
                              else f"pass {named} with a file name, not a directory")



#: the files a file browser leaves in a folder it shows (macOS Finder, Windows Explorer), compared without case; with
#: macOS's AppleDouble ``._NAME`` files: not the user's work, so a directory bertfeat replaces whole may hold them
BROWSER_FILES = (".ds_store", "thumbs.db", "desktop.ini")


def browser_file(entry: Path) -> bool:
    """``entry`` is a regular file a file browser made (``BROWSER_FILES``, ``._NAME``), removed with its directory."""
    name = entry.name
    return ((name.casefold() in BROWSER_FILES or (name.startswith("._") and len(name) > 2)) and entry.is_file()
            and not entry.is_symlink())


def _ours_in_dataset(entry: Path, partitions: int | None) -> bool:
    """An entry of a Dask output directory that a run wrote: the run's provenance, or a part file of one of its
    ``partitions`` (when the provenance says how many); a regular file, not a link (a link's target is the user's)."""
    from ..features.reader import DIRECTORY_PROVENANCE, part_index

    i = part_index(entry.name)
    named = entry.name == DIRECTORY_PROVENANCE or (i is not None and (partitions is None or i < partitions))
    return named and entry.is_file() and not entry.is_symlink()


def _partitions(out: Path) -> int | None:
    """The partitions a Dask output's run wrote, from its provenance (None: not said, or not readable)."""
    import json

    from ..features.reader import DIRECTORY_PROVENANCE

    try:
        n = json.loads((out / DIRECTORY_PROVENANCE).read_text(encoding="utf-8")).get("partitions")
    except (OSError, ValueError, AttributeError):
        return None
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None


def check_dataset_directory(out: Path) -> None:
    """A directory output (the Dask engine's) is replaced whole when a run writes it (--overwrite, a resume's finish):
    refused when it is not bertfeat's (no run provenance), and when it holds a file or folder bertfeat did not write
    there, named, so that nothing of the user's is deleted with it. A file browser's files (``browser_file``: .DS_Store,
    Thumbs.db ...) go with the directory."""
    from ..features.reader import DIRECTORY_PROVENANCE

    if not out.is_dir():
        return
    entries = sorted(p for p in out.iterdir() if not browser_file(p))
    if entries and not (out / DIRECTORY_PROVENANCE).is_file():
        raise OutputError(f"{out} is a directory that bertfeat did not write", f"choose another {opt_word('output', 'OUTPUT')}")
    n = _partitions(out)
    foreign = [p.name + ("/" if p.is_dir() and not p.is_symlink() else "") for p in entries if not _ours_in_dataset(p, n)]
    if foreign:
        named = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        them = "it" if len(foreign) == 1 else "them"
        raise OutputError(f"{out} holds {named}, which bertfeat did not write there (a run replaces the whole "
                          "directory, and would delete it with the old parts)",
                          f"move {them} out of {out}, or pass {opt('output')} with another name")


def feature_file_outputs(path: str | os.PathLike, fmt: str) -> list[tuple[str, Path]]:
    """A feature file and its side files: the ids file of a .npy, the provenance of a .npy/.csv."""
    from ..features import ids_sidecar_path, provenance_path

    path = Path(path)
    out = [("output", path)]
    if fmt == "npy":
        out.append(("ids file", ids_sidecar_path(path)))
    if fmt in ("npy", "csv"):
        out.append(("provenance file", provenance_path(path)))
    return out


def report_outputs(prefix: str | os.PathLike) -> list[tuple[str, Path]]:
    from ..pca.report import report_paths

    return [("report file", p) for p in report_paths(prefix).values()]


def remove_stale(files: Iterable[tuple[str, Path]]) -> None:
    """Remove an earlier run's files this run does not write again (OutputLayout.stale_pca): inside atomic.together(),
    when the group's files appear."""
    from ..atomic import removal

    for _, path in files:
        removal(path)


def feature_file_inputs(path: str | os.PathLike) -> list[Path]:
    """A feature file read as input, with the side files it is read with (they are inputs too): a .npy's ids file and
    provenance, a CSV's provenance (a CSV holds its ids: X.ids.csv beside it is no input of its)."""
    from ..features import ids_sidecar_path, provenance_path

    path = Path(path)
    suffix = path.suffix.lower()
    return ([path, ids_sidecar_path(path), provenance_path(path)] if suffix == ".npy" else
            [path, provenance_path(path)] if suffix == ".csv" else [path])


def partial_run_error(partial_dir: Path, stdin: bool = False) -> OutputError:
    if stdin:  # a run reading standard input cannot be resumed (plan.make_plan refuses resume for it)
        return OutputError(f"a partial run exists in {partial_dir} (left by a run that was killed)",
                           f"rerun with {opt('overwrite', True)} to start over (a run reading standard input cannot be "
                           "resumed), or remove that directory")
    return OutputError(f"a resumable partial run exists in {partial_dir}",
                       f"rerun the same command with {opt('resume', True)} to continue it, or with {opt('overwrite', True)} to start over")
