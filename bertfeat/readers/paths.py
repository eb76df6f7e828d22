"""Where the input's files are: a local file, a glob, a directory of Parquet files or an fsspec URL, and their compression.

A listing (a directory or a glob) holds input only: hidden files, what lies in a hidden directory or in a
directory ending in ``.partial`` (an interrupted bertfeat run's ``OUTPUT.partial/``: parts and manifest) and
bertfeat's own Parquet outputs are left out, so an output written inside the input folder is never read back as rows.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import stat
from pathlib import Path

from ..checks import UNEXPANDED_TILDE, is_parquet_name, link_to_nowhere, not_local
from ..errors import InputError, one_line, special_file_kind

_COMPRESSION = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".xz": "xz"}
_SPECIAL = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
OUTPUT_METADATA_KEYS = (b"bertfeat", b"bertfeat_part")  # a Parquet file bertfeat wrote: a feature file, or a part of one


def compression_of(path) -> str | None:
    """gzip/bz2/zstd/xz from a .gz/.bz2/.zst/.xz suffix, else None."""
    return _COMPRESSION.get(Path(str(path)).suffix.lower())


def is_url(path: str) -> bool:
    """An fsspec URL (s3://, gs://, file:// ...), not a local path."""
    return "://" in path


def local_containers(path: str) -> list[str]:
    """The local files a chained fsspec URL reads its file from (``zip://in.csv::data.zip``: data.zip; ``file://`` ones
    too), absolute: inputs as much as the file inside them (an output may not replace one; --resume compares them)."""
    if not is_url(path) or "::" not in path:
        return []
    out = []
    for part in path.split("::")[1:]:
        local = part[len("file://"):] if part.startswith("file://") else None if is_url(part) else part
        if local:
            out.append(os.path.abspath(os.path.expanduser(local)))
    return out


def _path_key(p: str) -> list[str]:
    """Files sort by their path's parts (as pathlib orders them), the same on every engine."""
    return p.split("/")


def refuse_special_file(path: str, fmt: str | None) -> None:
    """A named pipe, device or socket given as the input: refused from its type (``os.stat``), never opened (opening a
    FIFO waits for a writer, a device may never end), pointing at standard input. Any other path passes."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return  # missing or unreadable: the caller's own checks say so
    kind = next((name for test, name in _SPECIAL if test(mode)), None)
    if kind is not None:
        raise InputError(f"{path}: is {kind}, not a file",
                         f"to stream from a pipe pass - and feed it on standard input, e.g. cat {shlex.quote(path)} | bertfeat extract - "
                         f"--input-format {fmt or 'csv'} -o out.parquet")


def is_listed(relative_parts: tuple[str, ...], hidden: tuple[str, ...] = (".",)) -> bool:
    """A file found by listing a directory or matching a glob, by its path's parts below the listed folder, is input:
    no part hidden (``hidden`` prefixes: an atomic write's ``.NAME.tmp-PID``), no folder ending in ``.partial``."""
    folders = relative_parts[:-1]
    return not any(p.startswith(hidden) for p in relative_parts) and not any(f.endswith(".partial") for f in folders)


def is_bertfeat_output(path: str) -> bool:
    """A local Parquet file bertfeat wrote (its footer's metadata has a bertfeat key); False when it cannot be read."""
    import pyarrow.parquet as pq

    try:
        meta = pq.read_schema(path).metadata
    except Exception:  # noqa: BLE001  not Parquet, or unreadable: the reader reports it with its own message
        return False
    return any(k in (meta or {}) for k in OUTPUT_METADATA_KEYS)


GLOB_CHARS = "*?["


def is_pattern(path: str) -> bool:
    """Whether a local ``path`` is a glob: it holds a wildcard (``*``, ``?``, ``[``) and names no file or folder as
    written. A file named ``report[1].csv`` is that file (a glob would match report1.csv instead), as it is to a shell
    that finds no match; a file so named beside the files a pattern should match is reached with the pattern's
    wildcards in brackets (``glob.escape``: ``report[[]1].csv``)."""
    return any(ch in path for ch in GLOB_CHARS) and not os.path.exists(path)


def glob_root(pattern: str) -> int:
    """How many leading parts of a glob pattern hold no wildcard (the folder it lists)."""
    parts = Path(pattern).parts
    return next((i for i, p in enumerate(parts) if any(ch in p for ch in GLOB_CHARS)), len(parts))


def _escape_fix(pattern: str) -> str | None:
    """A pattern that matches nothing because a folder on its path has a wildcard in its name (``data[2024]/*.csv``:
    its ``[2024]`` matches one character) -> how to write it (``data[[]2024]/*.csv``); None otherwise."""
    import glob as globmod

    parts = Path(pattern).parts
    for i in range(len(parts) - 1, 0, -1):
        folder = Path(*parts[:i])
        chars = [ch for ch in GLOB_CHARS if ch in folder.name]
        if chars and folder.is_dir():
            said = f"the {', '.join(chars)} in its name as {'a wildcard' if len(chars) == 1 else 'wildcards'}"
            return f"{folder} is a folder, but a pattern reads {said}: write {Path(globmod.escape(str(folder)), *parts[i:])}"
    return None


def _local_glob(path: str, fmt: str, known: frozenset = frozenset()) -> tuple[list[str], int]:
    """The files a local glob matches that are input, sorted and absolute, and how many it left out (``known``: files
    already judged input, whose footer is not read again)."""
    import glob as globmod

    root = glob_root(path)
    matched = sorted(map(Path, globmod.glob(path, recursive=True)))
    _refuse_special(matched, path)
    found = [p for p in matched if p.is_file()]
    files = [os.path.abspath(p) for p in found if is_listed(p.parts[root:])]
    if fmt == "parquet":
        files = [f for f in files if f in known or not is_bertfeat_output(f)]
    return files, len(found) - len(files)


def _local_dir(p: Path, known: frozenset = frozenset(), underscored: list | None = None) -> tuple[list[str], int]:
    """The Parquet files (``is_parquet_name``) under a local directory that are input, sorted and absolute, and how
    many it left out (``known``: as in _local_glob; ``underscored``: gets the files left out only for a name starting
    with ``_``, which a glob of the folder would read)."""
    matched = sorted(f for f in p.rglob("*") if is_parquet_name(f.name))
    _refuse_special(matched, str(p))
    found = [f for f in matched if f.is_file()]
    files = [os.path.abspath(f) for f in found if is_listed(f.relative_to(p).parts, (".", "_"))]
    if underscored is not None:
        underscored += [str(f) for f in found if is_listed(f.relative_to(p).parts)
                        and not is_listed(f.relative_to(p).parts, (".", "_"))]
    files = [f for f in files if f in known or not is_bertfeat_output(f)]
    return files, len(found) - len(files)


def _text_files(p: Path) -> dict[str, int]:
    """The CSV / TSV / JSONL files directly in folder ``p`` (compressed too), counted by extension ({".csv": 3})."""
    counts: dict[str, int] = {}
    for f in p.iterdir():
        name = f.name[:-len(f.suffix)] if f.suffix.lower() in _COMPRESSION else f.name
        kind = Path(name).suffix.lower()
        if kind in (".csv", ".tsv", ".tab", ".jsonl", ".ndjson", ".json") and not f.name.startswith(".") and f.is_file():
            counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items()))


def _join_fix(path: str, counts: dict[str, int]) -> str:
    """How to read a folder of CSV / TSV / JSONL files (``counts``: _text_files): joined, a CSV / TSV keeping its first
    header line alone (cat keeps each file's, a bad row of each, readers.rejects REPEATED_HEADER)."""
    ext = next((k for k in counts if k in (".csv", ".tsv", ".tab")), None)
    if ext is None:
        return "pass one file, join them into one, or convert them to Parquet"
    folder = Path(path)
    suffix = next((s for f in sorted(folder.iterdir()) for s in _COMPRESSION if f.name.lower().endswith(ext + s)), "")
    how = join_line(f"{glob.escape(path.rstrip('/'))}/*{ext}{suffix}", ext, _COMPRESSION.get(suffix))
    return f"pass one file, join them into one (e.g. {how}, which keeps one header line), or convert them to Parquet"


#: the command that decompresses files beside themselves, by compression (join_line)
_DECOMPRESS = {"gzip": "gunzip -k", "bz2": "bunzip2 -k", "zstd": "unzstd", "xz": "unxz -k"}


def join_line(pattern: str, ext: str, compression: str | None = None) -> str:
    """The shell line that joins the text files ``pattern`` matches into one, ``all{ext}``: a CSV / TSV keeping the
    first file's header line alone (cat keeps each one's: a repeated-header bad row each); compressed files
    (``compression``) decompressed first, as awk and cat join bytes (gzip bytes in all.csv are no CSV)."""
    first = ""
    if compression is not None:
        suffix = next(s for s, c in _COMPRESSION.items() if c == compression)
        first = f"{_DECOMPRESS[compression]} {shell_pattern(pattern)}, then "
        pattern = pattern[:-len(suffix)] if pattern.lower().endswith(suffix) else pattern
    if ext in (".csv", ".tsv", ".tab"):
        return f"{first}awk 'NR == 1 || FNR > 1' {shell_pattern(pattern)} > all{ext}"
    return f"{first}cat {shell_pattern(pattern)} > all{ext}"


#: a compressed file's bytes to standard output, for a filter
_READ_DECOMPRESSED = {"gzip": "gzip -dc", "bz2": "bzip2 -dc", "zstd": "zstd -dc", "xz": "xz -dc"}
#: compressions bertfeat does not decompress, by suffix: (what, the command that writes the bytes to a pipe)
UNREAD_COMPRESSION = {".lz4": ("lz4", "lz4 -dc"), ".lzma": ("lzma", "xz -dc"), ".lz": ("lzip", "lzip -dc"),
                      ".br": ("brotli", "brotli -dc"), ".z": ("compress (.Z)", "gzip -dc"), ".7z": ("7-Zip", "7z x -so")}


def convert_line(path: str, command: str, tag: str, ext: str) -> str:
    """The shell line that runs the file ``path`` through the filter ``command`` into ``STEM.TAG.EXT`` in the current
    folder (``tr '\\r' '\\n' < x.csv > x.lf.csv``): a compressed file decompressed on the way (tr on gzip bytes makes
    no CSV), and never into the input's own name (``tr ... < x.lf.csv > x.lf.csv`` emptied x.lf.csv before tr read
    it; now ``x.lf.lf.csv``: one more part than the name it comes from). Standard input (``-``): FILE and NAME."""
    if path == "-":
        return f"{command} < FILE > NAME.{tag}.{ext}"
    name, compression = Path(path).name, compression_of(path)
    plain = Path(name).stem if compression else name  # x.csv.gz -> x.csv
    dest = shlex.quote(f"{Path(plain).stem}.{tag}.{ext}")
    if compression:
        return f"{_READ_DECOMPRESSED[compression]} {shlex.quote(path)} | {command} > {dest}"
    return f"{command} < {shlex.quote(path)} > {dest}"


#: a glob's wildcards: ``*``, ``?`` and a bracket expression (``[abc]``, ``[!0-9]``; ``]`` first is one of its letters)
_WILDCARD = re.compile(r"\*+|\?|\[!?\]?[^]]*\]")


def shell_pattern(pattern: str) -> str:
    """A glob ``pattern`` as a shell line writes it: its literal parts quoted (``shlex.quote``: a space, a quote or a
    ``$`` in a folder name stays one word), its wildcards bare so the shell still expands them (``'my data/'*.csv``);
    a one-letter bracket (``glob.escape``'s ``[[]``) is that letter, quoted with the rest; another bracket
    expression's letters are quoted inside it. A pattern starting with ``-`` gets ``./`` (no option to awk)."""
    if pattern.startswith("-"):
        pattern = "./" + pattern
    out, literal, at = [], "", 0
    for m in _WILDCARD.finditer(pattern):
        literal += pattern[at:m.start()]
        at, w = m.end(), m.group()
        if len(w) == 3 and w[0] == "[" and w[1] != "!":
            literal += w[1]  # an escaped letter
            continue
        if literal:
            out.append(shlex.quote(literal))
            literal = ""
        if w.startswith("["):
            neg = "!" if w[1:2] == "!" else ""
            inner = w[1 + len(neg):-1]
            w = f"[{neg}{shlex.quote(inner)}]"
        out.append(w)
    literal += pattern[at:]
    return "".join(out + [shlex.quote(literal)] * bool(literal))


def _refuse_special(matched: list[Path], pattern: str) -> None:
    """A named pipe, socket or device among the matches is refused, not skipped (named alone it is refused too; a
    FIFO is never opened: reading one waits for a writer)."""
    for p in matched:
        try:
            mode = os.stat(p).st_mode
        except OSError:
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise InputError(f"{p} (matched by {pattern}) is {special_file_kind(mode)}, not a file",
                             "move it out of the folder, or narrow the pattern to the data files")


def _left_out(n: int, prefixes: str = ".") -> str:
    return (f" ({n} left out: names starting with {prefixes}, OUTPUT.partial/ folders and bertfeat's own outputs "
            "are not input)" if n else "")


def _url_files(path: str) -> tuple:
    import zipfile

    import fsspec

    try:
        fs, _, paths = fsspec.core.get_fs_token_paths(path)
    except zipfile.BadZipFile as e:  # (it said "a .npz file is truncated", naming no file)
        held = ", ".join(local_containers(path)) or path.split("::", 1)[-1]
        raise InputError(f"{path}: {held} is not a zip archive, or a damaged one ({e})",
                         "pass a complete zip archive (zip -T tests one), or the file itself") from None
    except FileNotFoundError as e:
        raise InputError(f"{path}: no such file ({one_line(e)})", "check the URL and the archive's path") from None
    except (ImportError, ValueError) as e:
        raise InputError(f"{path}: cannot open this URL ({e})",
                         "install the fsspec filesystem for it (e.g. s3fs, gcsfs)") from None
    if len(paths) == 1 and fs.isdir(paths[0]):
        root = paths[0].rstrip("/")
        paths = [p for p in fs.find(root) if is_parquet_name(p)
                 and is_listed(tuple(p[len(root):].strip("/").split("/")), (".", "_"))]
    paths = sorted((p for p in paths if fs.isfile(p)), key=_path_key)
    if not paths:
        members = _archive_members(fs, path)
        raise InputError(f"{path}: no such file (or the pattern matches none)", f"check the URL{members}")
    return fs, paths


def _archive_members(fs, path: str) -> str:
    """For a message about an archive URL that names no file in it: '; the archive holds a.csv, b.csv' (10 at most)."""
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if not {"zip", "tar"} & set(protocols):
        return ""
    try:
        names = sorted(f for f in fs.find("") if fs.isfile(f))
    except Exception:  # noqa: BLE001  (only a hint)
        return ""
    shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    return f"; the archive holds {shown}" if names else "; the archive holds no file"


def resolve_files(path: str, fmt: str, known=(), glob: bool | None = None, underscored: list | None = None):
    """A file, a glob, or a directory of Parquet files -> (fsspec filesystem, the files sorted: one dataset).

    Local paths are checked here with their own messages and made absolute (a Dask worker may run elsewhere);
    a URL (s3://, gs://, ...) is listed by its filesystem. A file named by itself is read whatever its name;
    a listing leaves out what is not input (``is_listed``: hidden names and ``.partial`` folders; a directory
    also names starting with ``_``) and, for local Parquet, bertfeat's outputs (``is_bertfeat_output``, one footer
    read per file; a URL's listing keeps the name rules only). A named pipe, device or socket is refused before
    it is opened (``refuse_special_file``). ``known``: files an earlier listing took as input (Reader.listing: the
    files the path names now), whose footers are not read again; ``glob``: the path read as a glob or not, as that
    listing read it (None: ``is_pattern`` decides); ``underscored``: gets a local directory's Parquet files left out
    only for a name starting with ``_`` (Reader warns of them).
    """
    import fsspec

    if path == "-":
        return None, []
    if is_url(path):
        return _url_files(path)
    fs = fsspec.filesystem("file")
    if is_pattern(path) if glob is None else glob:
        files, n_out = _local_glob(path, fmt, frozenset(known))
        tilde = not_local(path) if not files else None
        if tilde and tilde[0] == "tilde":  # '~/d/*.csv' quoted: no shell expanded the ~ (nor the pattern)
            head, _, rest = path.partition("/")
            raise InputError(f"{path}: the pattern matches no file: it {UNEXPANDED_TILDE}",
                             f"give the pattern with the folder written out, '{tilde[1]}'"
                             + (f", or quote the pattern after the ~ alone: {head}/'{rest}'" if rest else ""))
        if not files:
            raise InputError(f"{path}: the pattern matches no {'input ' if n_out else ''}file{_left_out(n_out)}",
                             (not n_out and _escape_fix(path)) or
                             "check the glob pattern (quote it so the shell does not expand it)")
        return fs, files
    p = Path(path)
    if p.is_dir() and fmt != "parquet":
        raise InputError(f"{path}: is a directory", f"pass a {fmt.upper()} file (a directory works for Parquet only)")
    if p.is_dir():
        files, n_out = _local_dir(p, frozenset(known), underscored)
        if not files:
            what = f"no {'input ' if n_out else ''}.parquet or .pq file{_left_out(n_out, '. or _')}"
            counts = _text_files(p)
            if counts:  # a folder of CSV / JSONL files: read one at a time, the pattern says so
                text = " and ".join(f"{n} {k} file{'s' if n > 1 else ''}" for k, n in counts.items())
                raise InputError(f"{path}: the directory holds {what}, but {text} (a directory is read as Parquet; "
                                 "CSV, TSV and JSONL are read one file at a time)", _join_fix(path, counts))
            raise InputError(f"{path}: the directory holds {what}",
                             "point at a Parquet file, a directory of them, or a glob")
        return fs, files
    if not p.exists():
        tilde = not_local(path)
        if tilde and tilde[0] == "tilde":  # bertfeat.extract("~/x.csv"): Python expands no ~, as the shell does
            raise InputError(f"{path}: no such file: it {UNEXPANDED_TILDE}", f"give the path itself, {tilde[1]}")
        _refuse_bad_link(p)
        raise InputError(f"{path}: no such file", "check the path")
    refuse_special_file(path, fmt)
    if not os.access(p, os.R_OK):
        raise InputError(f"{path}: the file is not readable", "check its permissions")
    return fs, [os.path.abspath(p)]


def _refuse_bad_link(p: Path) -> None:
    """An input path that is a symbolic link leading nowhere: said as what it is (not "no such file")."""
    link = link_to_nowhere(p)
    if link is not None:
        loop, words = link
        raise InputError(f"{p}: is {words}", "point the link at the input file, or pass the file's own path" if loop
                         else "restore the file it points to, or pass the file's own path")
