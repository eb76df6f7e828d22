"""Option values shared by several commands, parsed in one place.

* ``parse_pca_spec``: ``extract(pca=...)`` / ``extract --pca`` and ``pca fit -n`` read the same way.
  ``100`` = that many components; ``0.95`` = the fewest components that explain 95 % of the variance;
  ``1.0`` or ``all`` = every component (100 % of the variance); 0, negatives, ``1.5``, nan are refused.
* ``check_size``: ``max_length``, ``max_batch_tokens`` and friends: 0 is refused, never "default".
* ``check_count``: ``pca fit`` / ``transform --batch-rows``, ``--probe-rows``: a count below its minimum is refused.
* ``check_stride``: ``stride`` without a chunk-* ``long_text`` is refused.
* ``check_truncate_dim``: ``truncate_dim`` a number of features, 1 or more (extract and ``Encoder.spec`` alike).
* ``parse_max_field_bytes``: ``max_field_bytes`` as bytes (``4MiB``, ``512KiB``, ``1000``).
* ``check_threads``, ``check_max_batch_tokens``: the encoder's load settings, checked alike by ``bertfeat.extract``
  (plan.make_plan) and ``Encoder(...)``.
* ``check_output_format``: an output whose extension names another format than ``format`` is refused.
* ``check_input_path``, ``check_output_name``: an empty input path; an output that names no file (empty, ``-``, a
  directory), or is no local path, or whose name starts or ends with whitespace (``-o 'o.parquet '``;
  ``refuse_blank_edges``, which a new cache directory's name goes through too).
* ``local_path``: a path bertfeat reads or writes as a local file (an output, a PCA model, a feature file, the cache):
  a URL (``s3://``, ``file://``, ``memory://``), a Windows path on POSIX (``C:\\data``) or an unexpanded ``~`` is
  refused, before pathlib takes it for a relative path and a run makes folders named ``s3:`` or ``~``; so are an
  empty path (the current directory to pathlib) and a name that is not UTF-8 (``invalid_unicode``).
* ``check_model_output``: so is a PCA model (``pca fit -o``, always a .npz) named like another format.
* ``env_switch``: an on / off environment variable (``BERTFEAT_BF16_EMULATE``, ``BERTFEAT_FUSE``): 1 / 0 and their
  words, else refused naming it.

Each names its option by the caller's Python parameter (errors.opt); the CLI shows it as its flag.
"""

from __future__ import annotations

import errno
import math
import numbers
import os
import re
from pathlib import Path

from .errors import BertfeatError, opt

PCA_FIX = ("give a whole number of components (e.g. 100), a variance fraction in (0, 1) (e.g. 0.95), mle (Minka's choice), "
           "or 1.0 / all for every component")

# extensions of formats bertfeat may be asked to write, and the format each names
_EXT_FORMAT = {".parquet": "parquet", ".pq": "parquet", ".npy": "npy", ".csv": "csv", ".tsv": "tsv", ".feather": "feather",
               ".arrow": "arrow", ".ipc": "arrow", ".json": "json", ".jsonl": "jsonl", ".npz": "npz", ".h5": "hdf5",
               ".hdf5": "hdf5", ".pkl": "pickle", ".pickle": "pickle", ".txt": "text", ".xlsx": "excel", ".orc": "orc",
               ".avro": "avro", ".gz": "gzip", ".zst": "zstd", ".bz2": "bz2", ".png": "png"}


def parse_pca_spec(text: str | int | float | None, param: str = "pca") -> int | float | str | None:
    """``"100"`` -> 100, ``"0.95"`` -> 0.95, ``"1.0"``/``"all"`` -> None (every component), ``"mle"`` -> "mle".

    ``param``: the parameter the value was given as (``pca`` of extract, ``n_components`` of a PCA fit),
    named in the error."""
    if text is None:
        return None
    s = str(text).strip()
    if s.lower() in ("all", "1.0", "1."):
        return None
    if s.lower() == "mle":  # Minka's MLE of the dimension, as scikit-learn's n_components='mle'
        return "mle"
    try:
        n = int(s)
    except ValueError:
        pass
    else:
        return _positive_int(n, param, s)
    try:
        x = float(s)
    except ValueError:
        raise BertfeatError(f"{opt(param, s, cli=repr(s))} is not a number", PCA_FIX) from None
    if not math.isfinite(x) or x <= 0:
        raise BertfeatError(f"{opt(param, x, cli=s)} is out of range", PCA_FIX)
    if x == 1.0:
        return None
    if x < 1:
        return x
    if x != int(x):
        raise BertfeatError(f"{opt(param, x, cli=s)}: a number of components must be whole", PCA_FIX)
    return int(x)


def _positive_int(n: int, param: str, text: str) -> int:
    if n < 1:
        raise BertfeatError(f"{opt(param, n, cli=text)} is out of range", PCA_FIX)
    return n


def check_size(value: int | None, param: str, minimum: int = 1, maximum: int | None = None, note: str = "") -> int | None:
    """None passes (the default); anything else must lie in minimum..maximum (0 never means 'default'): -> its int.
    ``param``: the option's Python parameter name (``max_batch_tokens``), named in the error."""
    if value is None:
        return None
    rng = f"{minimum}..{maximum}" if maximum is not None else f"{minimum} or more"
    fix = f"choose {rng}{note}, or leave it out for the default"
    if not _is_number(value):
        raise BertfeatError(f"{opt(param, value)} is not a number", fix)
    refuse_bool(value, param)
    if not value >= minimum or (maximum is not None and value > maximum):  # nan too
        raise BertfeatError(f"{opt(param, value)} is out of range", fix)
    _check_whole(value, param, fix)
    return int(value)  # (16.0 and np.int64(16): the int 16)


def refuse_bool(value, param: str, fix: str | None = None) -> None:
    """True / False for a count, refused in one wording (an Encoder's sizes, extract's whole-number options);
    ``fix``: the option's own, when it takes more than a whole number or None (``'1%'``, ``'8MiB'``)."""
    if isinstance(value, bool):
        raise BertfeatError(f"{opt(param, value)} is a bool, not a whole number",
                            fix or f"give {opt(param)} as a whole number, or leave it out")


def _check_whole(value, param: str, fix: str) -> None:
    """A count given as 3.5 is refused, not truncated to 3 (3.0 passes)."""
    if isinstance(value, numbers.Integral):
        return
    if not float(value).is_integer():
        raise BertfeatError(f"{opt(param, value)} is not a whole number", fix)


def _is_number(value) -> bool:
    """A real number (NumPy's included); a bool counts as one here, to be refused as out of range."""

    return isinstance(value, numbers.Real)


def is_numpy_bool(value) -> bool:
    """A NumPy bool scalar (``np.True_``: type ``bool`` in NumPy 2, ``bool_`` in NumPy 1), without importing NumPy."""
    return type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_")


def switch_value(value) -> bool | None:
    """``value`` as a switch of the Python API: True or False, NumPy's bools, and 1 / 0 as ints (as ``extract``'s
    switches take them) -> the bool; anything else (a string above all: "no" is truthy) -> None."""
    if isinstance(value, bool) or is_numpy_bool(value):
        return bool(value)
    if isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value)
    return None


def check_switch(value, param: str) -> bool:
    """A switch of the Python API (``switch_value``): -> True or False, or the error naming ``param``."""
    kept = switch_value(value)
    if kept is None:
        raise BertfeatError(f"{opt(param, value)} is not True or False", f"give {opt(param, True)} or {opt(param, False)}")
    return kept


def link_to_nowhere(path) -> tuple[bool, str] | None:
    """A path that is a symbolic link leading nowhere -> (whether it is a loop, its words: "a loop of symbolic links
    (to T, which leads back to it)" or "a broken symbolic link (to T, which does not exist)"); else None. Said as
    such by every reader of a path a user names (not "no such file", not mkdir's "File exists")."""
    if not os.path.islink(path) or os.path.exists(path):
        return None
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return True, f"a loop of symbolic links (to {os.readlink(path)}, which leads back to it)"
    return False, f"a broken symbolic link (to {os.readlink(path)}, which does not exist)"


def check_count(value: int, param: str, minimum: int = 1) -> int:
    """A count that has no "default" spelling (``batch_rows``, ``probe_rows``): a whole number, ``minimum`` or more,
    refused as ``--batch-rows 0 is out of range - give 1 or more`` (as ``chunk_rows`` is)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise BertfeatError(f"{opt(param, value)} is out of range", f"give {minimum} or more")
    return value


def check_truncate_dim(value) -> int | None:
    """``truncate_dim``: None (the model's own choice) or a number of features, 1 or more (its upper bound, the
    features' width, is the model's: Encoder.spec)."""
    check_size(value, "truncate_dim", 1, None, " (the first features of each vector are kept)")
    return None if value is None else int(value)


def check_stride(stride: int | None, long_text) -> None:
    """``stride`` is the overlap of ``long_text`` chunk-mean / chunk-max windows: given with another mode it would do
    nothing, so it is refused (as ``workers`` without the Dask engine is)."""
    if stride is not None and not str(long_text).startswith("chunk"):
        raise BertfeatError(f"{opt('stride', stride)} applies to {opt('long_text', 'chunk-mean')} or chunk-max only "
                            f"(the windows' overlap), not to {opt('long_text', long_text)}",
                            f"add {opt('long_text', 'chunk-mean')} (or chunk-max) to cut long texts into windows, or "
                            f"drop {opt('stride')}")


_SIZE = re.compile(r"\s*(\d+)\s*([kmg]i?b?|b)?\s*", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1 << 10, "m": 1000**2, "mb": 1000**2, "mib": 1 << 20,
          "g": 1000**3, "gb": 1000**3, "gib": 1 << 30, "ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30}
#: the largest text, pair, id or kept value a reader holds (max_field_bytes); a larger one is a bad row
#: (RejectCode.FIELD_TOO_LARGE), its bytes skipped as read: the memory of a run stays bounded by the settings
DEFAULT_MAX_FIELD_BYTES = 4 << 20
MAX_FIELD_BYTES_LIMIT = 1 << 30  # a larger value in one field is beyond what the readers hold (pyarrow's 2 GiB block)


def parse_max_field_bytes(value, param: str = "max_field_bytes") -> int:
    """``max_field_bytes``: a whole number of bytes or a size such as ``4MiB``, ``512KiB``, ``8MB``, 1 byte to 1 GiB."""
    fix = "give bytes, e.g. 4MiB (the default), 512KiB or 16MiB, up to 1GiB"
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, str)):
        raise BertfeatError(f"{opt(param, value)} is not a size", fix)
    m = _SIZE.fullmatch(value) if isinstance(value, str) else None
    if isinstance(value, str) and m is None:
        raise BertfeatError(f"{opt(param, value, cli=repr(value))} is not a size", fix)
    n = int(value) if m is None else int(m.group(1)) * _UNITS[(m.group(2) or "").lower()]
    if not 1 <= n <= MAX_FIELD_BYTES_LIMIT:
        raise BertfeatError(f"{opt(param, value, cli=str(value).strip())} is out of range", fix)
    return n


def check_max_length(value: int | None, param: str = "max_length") -> int | None:
    return check_size(value, param, 3, None, " (up to the model's max_position_embeddings, 512 for BERT and MiniLM)")


def check_max_batch_tokens(value: int | None, param: str = "max_batch_tokens") -> int | None:
    return check_size(value, param, 1, None, " (tokens per batch, padded rows x length; default 512)")


#: what an on / off environment variable takes (any case): on, then off
SWITCH_ON, SWITCH_OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def env_switch(name: str, default: bool) -> bool:
    """An on / off environment variable: 1, true, yes or on; 0, false, no or off (any case); unset or empty:
    ``default``. Anything else is refused naming it (BERTFEAT_BF16_EMULATE=garbage read as off, BERTFEAT_FUSE=garbage
    as on, without a word), as its neighbours BERTFEAT_DEDUP_MEMORY and BERTFEAT_KERNELS are."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if text.lower() in SWITCH_ON + SWITCH_OFF:
        return text.lower() in SWITCH_ON
    raise BertfeatError(f"{name}={text!r} is not on or off",
                        f"set {name}=1 (on) or {name}=0 (off), or unset it (the default: {'on' if default else 'off'})")


def check_threads(value: int | None, param: str = "threads") -> int | None:
    """None passes (every core); anything else must be a number of threads, 1 or more (the Encoder takes its int)."""
    if value is None:
        return None
    fix = "give 1 or more (default: all cores)"
    if not _is_number(value):
        raise BertfeatError(f"{opt(param, value)} is not a number", fix)
    refuse_bool(value, param)
    if not value >= 1:
        raise BertfeatError(f"{opt(param, value)} is out of range", fix)
    _check_whole(value, param, fix)
    return int(value)


def check_output_format(path: str | Path | None, fmt: str | None, formats=("parquet", "npy", "csv")) -> None:
    """Refuse an output file whose extension names another format than the one written, and a ``fmt`` that is no
    format written (``CSV``: its extension was compared with a format that does not exist, "ends in .csv, but
    --format CSV writes CSV - name the output .parquet")."""
    if fmt and fmt not in formats:
        raise BertfeatError(f"unknown {opt('format', fmt, cli=repr(fmt))}", f"choose one of {', '.join(formats)}"
                            + (f" (formats are lower case: {opt('format', fmt.lower())})" if fmt.lower() in formats else ""))
    if path is None:
        return
    p = Path(str(path))
    suffix = p.suffix.lower()
    named = _EXT_FORMAT.get(suffix)
    if named is None:  # no extension or an unknown one: the format decides, unless a reader could not tell it later
        if fmt in ("npy", "csv") and fmt in formats:  # pca fit, verify ... read a file by its extension (else Parquet)
            raise BertfeatError(f"the output {p} has no .{fmt} extension, so it would be read back as Parquet",
                                f"name the output {p.with_name(p.name + '.' + fmt)}")
        return
    written = fmt or named
    if named != written or written not in formats:
        if fmt:
            what = f"the output {p} ends in {suffix}, but {opt('format', fmt)} writes {fmt.upper()}"
        else:
            what = f"the output {p} ends in {suffix}, a format bertfeat does not write"
        raise BertfeatError(what, f"name the output .{written if written in formats else 'parquet'}, "
                                  f"or choose {opt('format')} to match ({', '.join(formats)})")


INPUT_FIX = ("pass the input file (CSV, TSV, Parquet or JSONL), a directory or glob of Parquet files, or - for "
             "standard input")


def check_input_path(path, what: str = "the input path") -> None:
    """Refuse an empty input path (``bertfeat extract ""``), which would read the current directory as a Parquet
    dataset."""
    if isinstance(path, (str, bytes)) and not path:
        raise BertfeatError(f"{what} is empty", INPUT_FIX)


#: why a path that starts with a ~ no shell expanded is not the file its writer meant (local_path, and an input
#: path not found: readers.paths)
UNEXPANDED_TILDE = "starts with ~, which no shell expanded (bertfeat takes a path as it is given)"
#: a URL's scheme and its slashes (s3://, file:///, memory://; also as pathlib keeps it, with one slash: s3:/bucket)
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):(/+)")
#: schemes pyarrow and fsspec take for a URI even without slashes (file:out.parquet): refused as URLs too
_BARE_SCHEME = re.compile(r"^(file|s3|s3a|gs|gcs|hdfs|viewfs|abfs|abfss|az|adl|http|https|ftp|sftp|memory|zip|tar|"
                          r"github|hf):(?!/)", re.I)
#: a Windows drive or network path (C:\\data, C:/data, \\\\server\\share); on POSIX, part of a relative file name
_WINDOWS = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\)")


def not_local(path) -> tuple[str, str | None] | None:
    """Why ``path`` is no local path of this system, and the local path it stands for when there is one:
    ``("url", None)`` (s3://, memory:// ...), ``("file", "/data/x.csv")`` (file://), ``("windows", None)`` (C:\\x on
    POSIX), ``("tilde", "/home/me/x")`` (a ~ no shell expanded), ``("nul", None)`` (no file name holds a NUL); None
    for a local path."""
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if "\x00" in text:
        return "nul", None
    m = _URL.match(text)
    if m:
        scheme = m.group(1).lower()
        return ("file", "/" + text[m.end():]) if scheme == "file" else ("url", None)
    m = _BARE_SCHEME.match(text)
    if m and not os.path.lexists(text):  # an existing file of that name is local: bertfeat reads it as a path
        return ("file", text[m.end():]) if m.group(1).lower() == "file" else ("url", None)
    if os.name != "nt" and _WINDOWS.match(text):
        return "windows", None
    if text.startswith("~"):
        head = text.split("/", 1)[0]
        expanded = os.path.expanduser(head)
        if expanded != head and not os.path.lexists(head):
            return "tilde", expanded + text[len(head):]
    return None


#: an environment variable's reference, $NAME or ${NAME}, at the start of a path's part
_VARIABLE = re.compile(r"\$(?:\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)")


def unexpanded_variable(text: str) -> tuple[str, str] | None:
    """(``$NAME``, the part) for the first part of a path to write that does not exist yet and starts with an
    environment variable's reference no shell expanded (a config file's ``$OUT/x.parquet``, ``BERTFEAT_CACHE=$HOME/c``:
    a run made a folder named ``$OUT`` beside it and wrote there); None for any other path. A part that exists (a
    user's folder named so) is taken as it is."""
    parts = Path(text).parts
    for i, part in enumerate(parts):
        m = _VARIABLE.match(part)
        if m and not os.path.lexists(Path(*parts[: i + 1])):
            return m.group(0), part
    return None


def invalid_unicode(value: str) -> str | None:
    """Where ``value`` is not valid Unicode text, as words ("byte 0xe9 at character 3": counted from 0), else None.

    A command-line argument with bytes that are not UTF-8 reaches Python as lone surrogates U+DC80..U+DCFF
    (``surrogateescape``), each standing for one byte; any other lone surrogate is named as such."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        code = ord(value[e.start])
        what = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"lone surrogate U+{code:04X}"
        return f"{what} at character {e.start}"  # counted from 0, as rows, bytes and columns are
    return None


def kind_of(value) -> str:
    """A value's type as a message names it: "a bytes", "an int"."""
    kind = type(value).__name__
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def path_text(value, option: str | None, what: str = "", optional: bool = False) -> str:
    """A path given as a str or an ``os.PathLike`` (a ``Path``) -> its text; anything else (bytes, a number) refused
    naming ``option`` (None: an argument, named by ``what``), in ``bertfeat.extract``'s words: pathlib's own TypeError
    said nothing of the parameter. ``optional``: None may be given instead (said so)."""
    text = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(text, str):
        named, target = (opt(option, value), opt(option)) if option else (f"the {what} path {value!r}", f"the {what}'s path")
        raise BertfeatError(f"{named} is {kind_of(text)}, not a string or a path" + (", or None" if optional else ""),
                            f"give {target} as a string or a path" + (", or leave it out" if optional else ""))
    return text


def local_path(path, what: str, option: str | None = None, writes: bool = False) -> Path:
    """``path`` as a local ``Path``, or refused: a URL, a Windows path on POSIX or an unexpanded ``~`` would be read as a
    relative path (a run writing it would make folders named ``s3:``, ``file:``, ``C:\\x`` or ``~``). ``what`` names
    it (the output, the PCA model ...), ``option`` is the parameter that gives it (None: an argument), ``writes``:
    bertfeat writes it. An empty path is refused too: pathlib takes it for the current directory (``cache clear ""``
    cleared the cache of the directory it ran in, ``verify ""`` read it as a Dask output)."""
    how = f"pass {opt(option)} with" if option else "give"
    path_text(path, option, what)  # bytes: pathlib's TypeError
    if not os.fspath(path):
        raise BertfeatError(f"the {what} path is empty ('', which would name the current directory)",
                            f"{how} the {what}'s path")
    bad = invalid_unicode(os.fsdecode(path))  # Arrow takes UTF-8 paths only; provenance and reports name the file
    if bad:
        why = "Arrow opens UTF-8 paths only, and provenance and reports name the file in UTF-8"
        raise BertfeatError(f"the {what} {os.fsdecode(path)} is not a UTF-8 name ({bad})",
                            f"{how} a UTF-8 name ({why})" if writes else f"rename it with a UTF-8 name ({why})")
    why = not_local(path)
    text = os.fspath(path)

    def shown(value: str) -> str:
        return opt(option, value) if option else value

    if why is None and writes and isinstance(text, str):
        unexpanded = unexpanded_variable(text)
        if unexpanded is not None:
            variable, name = unexpanded
            expanded = os.path.expandvars(text)
            raise BertfeatError(f"the {what} {text} holds {variable}, which no shell expanded (bertfeat takes a path as "
                                f"it is given, and would make '{name}' as it is written)",
                                f"{how} the path itself, {shown(expanded)}" if expanded != text else
                                f"{how} the path {variable} stands for ({variable} is not set here)")
    if why is None:
        return Path(text)
    kind, local = why

    if kind == "url":
        scheme = text.split(":", 1)[0]
        what = f"the {what} {text} is a URL ({scheme}://): bertfeat {'writes' if writes else 'reads'} local files only"
        fix = (f"{how} a local path, e.g. {shown(_url_name(text))}" if writes
               else f"copy it to this machine and {how} its local path")
    elif kind == "file":
        what, fix = f"the {what} {text} is a file:// URL, not a path", f"{how} the path itself, {shown(local)}"
    elif kind == "nul":
        what, fix = f"the {what} {text} holds a NUL character, which no file name can hold", f"{how} a path without it"
    elif kind == "windows":
        what = f"the {what} {text} is a Windows path, which this system takes for a file name in this directory"
        fix = f"{how} a path of this system (directories separated by /)"
    else:
        what = f"the {what} {text} {UNEXPANDED_TILDE}"
        fix = f"{how} the path itself, {shown(local)}"
    raise BertfeatError(what, fix)


def _url_name(url: str) -> str:
    """A URL's last name (``s3://b/out/x.parquet`` -> ``x.parquet``), for an example of a local path."""
    return url.rstrip("/").rsplit("/", 1)[-1] or "features.parquet"


def names_directory(text: str) -> str | None:
    """How an output text names a directory: it ends in / or is . or .. (pathlib drops the slash, so ``dir/`` would
    write a file ``dir``); None when it does not."""
    if text.endswith(("/", os.sep)):
        return "ends in /, so it names a directory"
    last = text.rsplit("/", 1)[-1]
    if last == ".":
        return "is the current directory"
    if last == "..":
        return "is the parent directory"
    return None


PARQUET_SUFFIXES = (".parquet", ".pq")  # Parquet by the name, in any case: a file named alone, a folder's listing


def is_parquet_name(name: str) -> bool:
    """A file a directory of Parquet files holds by its name: ``.parquet`` or ``.pq``, in any case (``part-0.PQ``), as
    ``--input-format`` is told from one file's extension; a listing that took ``*.parquet`` alone left the others out
    without a word."""
    return Path(name).suffix.lower() in PARQUET_SUFFIXES


def _holds_parquet(p: Path) -> bool:
    try:
        return any(is_parquet_name(c.name) for c in p.iterdir())
    except OSError:  # a folder we may not list: no dataset we could read either
        return False


def directory_output_error(path, what: str, example: str, why: str = "is a directory",
                           option: str = "output") -> BertfeatError:
    """The one refusal of an output file that names a directory, with a file name in it as the example; beside it
    when the directory holds Parquet files (a dataset, a Dask engine's output: a file written into it would be read
    as one of its parts; not for ``.`` or ``dir/..``, which have no name to put a file beside)."""
    p = Path(os.fspath(path))
    dataset = p.name not in ("", "..") and p.is_dir() and _holds_parquet(p)
    inside = os.fspath(p.with_name(f"{p.stem}.{example}")) if dataset else os.path.join(os.fspath(path), example)
    return BertfeatError(f"the {what} {os.fspath(path)} {why}",
                         f"pass {opt(option)} with a file name, e.g. {opt(option, inside)}")


def is_directory(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a directory; False when it cannot be looked at (a name too long for its file system: the
    name-length check says so, with the bytes to cut, where Path.is_dir raised ENAMETOOLONG)."""
    try:
        return Path(path).is_dir()
    except OSError:
        return False


def check_output_name(path: str | Path, what: str, example: str, option: str = "output", kind: str = "file") -> None:
    """Refuse an output (or a report prefix) that names no file: empty (-o "") or an extension alone (-o .npz), which
    would write hidden files such as .npz or ..report.json; ``-``, standard output, which bertfeat never writes to
    (its outputs are files, written atomically); a directory (``.``, ``..``, ``dir/``; with ``kind`` "file", an
    existing directory too); and what is no local path (``local_path``: a URL, ``C:\\x``). ``kind``: "file",
    "prefix" (report files PREFIX.*: an existing directory's name is a prefix like any) or "directory" (the Dask
    engine's output, a directory of parts: ``out/`` is fine). ``option``: the parameter that gives it."""
    text = path_text(path, option)
    if text == "-":
        raise BertfeatError(f"the {what} '-' means standard output, which bertfeat does not write to (its outputs are "
                            "files, written atomically)",
                            f"pass {opt(option)} with a file name, e.g. {opt(option, example)}")
    if text == "" or Path(text).name.lower() in {".npz", ".parquet", ".npy", ".csv", ".json", ".md", ".png", ".pq"}:
        shown, why = ("''", "is empty") if text == "" else (text, "is an extension with no name")
        raise BertfeatError(f"the {what} {shown} {why}", f"pass {opt(option)} with a file name, e.g. {opt(option, example)}")
    local_path(text, what, option, writes=True)
    why = names_directory(text)
    if why is not None and not (kind == "directory" and text.endswith(("/", os.sep))):
        raise directory_output_error(text, what, example, why, option)
    if kind == "file" and is_directory(text):
        raise directory_output_error(text, what, example, option=option)
    refuse_blank_edges(text, what, example, option)


_SPACES = {" ": "a space", "\t": "a tab", "\n": "a line break", "\r": "a carriage return", "\xa0": "a no-break space"}


def refuse_blank_edges(text: str, what: str, example: str, option: str, kind: str = "file") -> None:
    """An output's name that starts or ends with whitespace (a pasted name, a stray space inside the quotes) would
    write a file (or make a ``kind`` "directory", the cache's) whose name few tools show and a shell must quote:
    nobody means it."""
    name = Path(text).name
    edge = next(((where, c) for where, c in (("starts with", name[:1]), ("ends in", name[-1:])) if c.isspace()), None)
    if edge is None:
        return
    if not name.strip():
        raise BertfeatError(f"the {what} {text!r} names a {kind} of whitespace only",
                            f"pass {opt(option)} with a {kind} name, e.g. {opt(option, example)}")
    where, c = edge
    space = _SPACES.get(c, f"whitespace ({c!r})")
    raise BertfeatError(f"the {what} {text!r} {where} {space}, which would be part of the name written",
                        f"pass {opt(option)} without it: {opt(option, os.fspath(Path(text).with_name(name.strip())))}")


def check_model_output(path: str | Path, option: str = "output") -> None:
    """Refuse a PCA model file (a .npz archive) whose extension names another format, e.g. ``-o reduced.parquet``
    (the reduced features are ``pca transform``'s output); no extension or an unknown one is taken as it is.
    ``option``: the parameter that named it (``PCA.save``'s ``path``)."""
    p = Path(str(path))
    suffix = p.suffix.lower()
    named = _EXT_FORMAT.get(suffix)
    if named is None or named == "npz":
        return
    raise BertfeatError(f"the PCA model {p} ends in {suffix}, but a PCA model is a .npz archive",
                        f"name it .npz (e.g. {opt(option, p.with_suffix('.npz').name)}); "
                        "reduced features are written by `bertfeat pca transform`")
