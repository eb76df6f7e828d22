"""Every option of an extract run, declared once: the fields of ``ExtractOptions``.

A field is one option: its name (the keyword of ``bertfeat.extract``, the parameter its errors name through
``errors.opt``, shown by the CLI as its flag ``--name-with-dashes``), its type, its default and its check: a function
of the value as given that returns the value as the run keeps it, or raises the error naming the option. An option
whose value is judged only against other options, the input or the model has no check of its own; its declaration
says where it is judged (``checked_by``). ``plan.make_plan`` runs the checks, in the order its errors come, and the
rules across options; the engines read the options from the plan (``plan.options``).

Adding an option: its field here, its flag in ``cli/app.py:extract``, its keyword in ``bertfeat.extract``
(``run/api.py``), and its use where it acts; tests/run/test_options.py holds the three lists equal.

This module imports nothing numeric: the CLI's help reads it.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import math
import numbers
import os
import re
import shlex
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..checks import (DEFAULT_MAX_FIELD_BYTES, check_input_path, check_max_batch_tokens, check_max_length, check_size,
                      check_threads, check_truncate_dim, is_numpy_bool, kind_of, parse_max_field_bytes, refuse_bool)
from ..errors import BertfeatError, either, opt

ENGINES = ("local", "dask")
BAD_ROW_POLICIES = ("error", "skip")
DEFAULT_CHUNK_ROWS = 2048
DEFAULT_BLOCKSIZE = "8MiB"
#: the fix when a script calls extract at its top level, unguarded, and a process it starts imports it (api.py,
#: dask_cluster.py)
MAIN_GUARD_FIX = ('call bertfeat.extract under `if __name__ == "__main__":` in the script (a local Dask cluster\'s '
                  "worker processes import it as they start, as every multiprocessing process does)")
ALL_COMPONENTS = "all"  # pca=1.0 / "all": keep every component (PCA(n_components=None))
#: the options that are Encoder(...) load keywords besides the model (encoder_keywords)
ENCODER_OPTIONS = ("max_batch_tokens", "threads", "precision")


def option(default: Any = dataclasses.MISSING, check: Callable[[Any], Any] | None = None, *, checked_by: str = "",
           cli: bool = True) -> Any:
    """One option's declaration, a field of ExtractOptions: its ``default`` (none: required), its ``check`` (value as
    given -> value as the run keeps it; its error names the option), else ``checked_by``: where it is judged;
    ``cli``: False for an option the command line has no flag for (it sets it itself, or Python alone gives it)."""
    if check is None and not checked_by:
        raise TypeError("an option without a check says where it is checked (checked_by)")
    return field(default=default, metadata={"check": check, "checked_by": checked_by, "cli": cli})


# --------------------------------------------------------------------------- the checks of one value
def check_input(value) -> str:
    """``input``: a path or '-' (standard input) -> the path as a string."""
    if not isinstance(value, (str, os.PathLike)):
        raise BertfeatError(f"input is a {type(value).__name__}, not a file path",
                            "extract reads a file (CSV, TSV, Parquet, JSONL) or '-' for standard input; for texts in "
                            "memory use bertfeat.Encoder().encode(texts), or bertfeat.sklearn.TextFeatures")
    value = os.fspath(value)
    check_input_path(value)
    return value


def check_chunk_rows(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BertfeatError(f"{opt('chunk_rows', value)} is out of range", "give 1 or more")
    return value


def check_engine(value) -> str:
    if value not in ENGINES:
        raise BertfeatError(f"unknown {opt('engine', value, cli=repr(value))}", "choose local or dask")
    return value


def check_on_bad_row(value) -> str | None:
    if value is not None and value not in BAD_ROW_POLICIES:
        raise BertfeatError(f"unknown {opt('on_bad_row', value, cli=repr(value))}", "choose error or skip")
    return value


def check_max_bad_rows(value):
    from ..readers.rejects import parse_max_bad_rows

    return parse_max_bad_rows(value)


def check_dtype(value) -> str:
    """A name (``"float16"``), or NumPy's own spelling of the type (``np.float16``, ``np.dtype("float16")``), as a
    NumPy user writes it: -> its name, checked; any other type refused as check_types refuses it."""
    from ..features.base import check_dtype as feature_dtype

    if value is not None and not isinstance(value, str):
        import numpy as np

        if not (isinstance(value, np.dtype) or any(value is t for t in (float, int, complex))  # float64 ...: by name
                or isinstance(value, type) and issubclass(value, np.generic)):
            raise type_error("dtype", value, (str,))
        value = np.dtype(value).name  # float64, int8 ...: refused by name below
    return feature_dtype(value)


def parse_pca(value) -> int | float | str | None:
    """``pca``: None (no PCA), a count, a variance fraction, or ALL_COMPONENTS (the parser of ``pca fit -n``)."""
    if isinstance(value, bool) or is_numpy_bool(value):
        value = bool(value)  # np.True_ was read as its text: pca='True' is not a number
        raise BertfeatError(f"{opt('pca', value)} is not a size", "give a number of components (64) or a variance fraction (0.95)")
    if value is None:
        return None
    if isinstance(value, numbers.Rational) and not isinstance(value, int):  # Fraction(1, 2): its text is '1/2'
        value = float(value)
    from ..checks import parse_pca_spec  # "" (or blanks) is refused there, as not a number: it never means "no PCA"

    n = parse_pca_spec(value, "pca")
    return ALL_COMPONENTS if n is None else n


def check_pca_model_file(value) -> Path | None:
    """``pca_model``: a PCA model file to apply, checked as a file here (its fit against the features, once the model
    is loaded, in pca_steps.applied_pca)."""
    if value is None:
        return None
    from ..checks import local_path

    path = local_path(value, "PCA model", "pca_model")
    if not path.is_file():
        raise BertfeatError(f"the PCA model {path} does not exist" if not path.exists() else f"the PCA model {path} is not a file",
                            f"pass {opt('pca_model')} with a .npz written by `bertfeat pca fit` or `extract --pca`")
    from ..features.arrayfile import check_array_file

    check_array_file(path, "PCA model")
    return path


def check_cache(value) -> Path | None:
    from ..cache.store import resolve_cache

    return resolve_cache(value)


def check_format(value) -> str | None:
    """``format``: None (from the output's extension) or a format written (features.FORMATS)."""
    if value is not None:  # (an empty one was the extension's choice, unsaid)
        from ..features import FORMATS

        if value not in FORMATS:
            raise BertfeatError(f"unknown output format '{value}'", f"choose one of {', '.join(FORMATS)}")
    return value


def check_precision(value) -> str:
    from ..ops.gemm import check_precision as gemm_precision

    gemm_precision(value)
    return value


#: local Dask workers per core at most: each is a process with its own model copy, and the encode is CPU-bound
WORKERS_PER_CORE = 4


def check_workers(value) -> int | None:
    if value is not None and (isinstance(value, bool) or value < 1):
        raise BertfeatError(f"{opt('workers', value)} is out of range", "give 1 or more")
    from ..ops.threads import default_threads

    most = WORKERS_PER_CORE * default_threads()
    if value is not None and value > most:  # (99999999999999999999 got the process killed, out of memory)
        raise BertfeatError(f"{opt('workers', value)} would start {value:,} local processes, each with its own copy of "
                            f"the model, on {default_threads()} core(s)",
                            f"give at most {most} ({WORKERS_PER_CORE} per core), or start a cluster with `dask "
                            f"scheduler` / `dask worker` and pass {opt('scheduler')} in place of {opt('workers')}")
    return value


def parse_blocksize(value) -> int | None:
    """'8MiB', '64MB', '1000000', 0, None, 'none' -> bytes (None: no splitting)."""
    if value is None or value == 0 or (isinstance(value, str) and value.strip().lower() in ("", "0", "none", "file")):
        return None
    if isinstance(value, int):
        n = value
    else:
        from dask.utils import parse_bytes

        try:
            n = int(parse_bytes(value))
        except (ValueError, TypeError):
            raise BertfeatError(f"{opt('blocksize', value, cli=repr(value))} is not a size", "give bytes, e.g. 8MiB, 64MB or none") from None
    if n < 1:
        raise BertfeatError(f"{opt('blocksize', value)} is out of range", "give a positive size, e.g. 8MiB, or none")
    return n


#: what to give for the label (an empty name or another type is refused before the input is opened: its columns unknown)
LABEL_FIX = f"give {opt('label')} the name of the input's column that holds the labels, e.g. {opt('label', 'label')}"


def check_label(value) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        why = "is empty" if isinstance(value, str) else "is not a column name"
        raise BertfeatError(f"{opt('label', value, cli=repr(value))} {why}", LABEL_FIX)
    return value


def check_estimate(value) -> bool | int:
    if value is None:
        raise BertfeatError(f"{opt('estimate', value)} is not True, False or a number of rows",
                            f"give {opt('estimate', True)}, or a number of rows to measure on, e.g. {opt('estimate', 500)}")
    if value is not False and value is not True:
        try:
            check_size(value, "estimate", 2, None)
        except BertfeatError as e:  # (--estimate-rows on the command line: left out, the default sample)
            raise BertfeatError(e.marked_what, "choose 2 or more (rows to measure on), or "
                                + either("estimate=True", "leave it out") + " for the default sample") from None
    return value


def keep_columns(keep) -> list[tuple[str, str | None]]:
    """``keep`` -> (column name, type name or None) pairs, no name empty or twice. A string is read as a CSV line
    (``parse_keep``); a list or tuple names one column per item, exactly; a dict maps names to types (None: decided by
    the input). Against the output (its format, the id column, its own columns): plan.check_keep."""
    from ..readers.kept import TYPE_NAMES

    if not isinstance(keep, (str, bytes, dict)) and callable(getattr(keep, "tolist", None)):
        keep = keep.tolist()  # a NumPy array or a pandas Index / Series of names (df.columns[[1, 2]])
    if keep is None or (isinstance(keep, (list, tuple, dict)) and not keep):
        return []
    if isinstance(keep, str):
        pairs = parse_keep(keep)
    elif isinstance(keep, (list, tuple)) and all(isinstance(k, str) for k in keep):
        pairs = [(k, None) for k in keep]
    elif isinstance(keep, dict) and all(isinstance(k, str) and (t is None or t in TYPE_NAMES) for k, t in keep.items()):
        pairs = list(keep.items())
    elif isinstance(keep, dict) and all(isinstance(k, str) for k in keep):  # the names are; a type is not
        name, typ = next((k, t) for k, t in keep.items() if t is not None and t not in TYPE_NAMES)
        raise BertfeatError(f"{opt('keep', keep)}: {typ!r} (the type of {name!r}) is not a type",
                            f"give one of {', '.join(TYPE_NAMES)}, or None for the input's own")
    elif isinstance(keep, (set, frozenset)):
        raise BertfeatError(f"{opt('keep', keep)} is a set, whose order is not the columns' order",
                            f"give the names as a list, e.g. {opt('keep', sorted(map(str, keep)))}")
    else:
        raise BertfeatError(f"{opt('keep', keep)} is not a column name or a list of them",
                            f'give keep="label", keep=["label", "split"] or keep={{"label": "int"}} (types: '
                            f'{", ".join(TYPE_NAMES)})')
    names = [n for n, _ in pairs]
    if isinstance(keep, str) and not keep:  # (--keep "$COLUMNS" with the variable empty; a blank name is a name)
        raise BertfeatError(f"{opt('keep', keep, cli=repr(keep))} names no column",
                            "give the columns to keep, e.g. label,split, or leave it out; a column that has no name in "
                            "the input cannot be kept (a kept column keeps its name in the output): name it there")
    if any(not n for n in names):
        if not isinstance(keep, str) or re.search(r'(^|,)\s*""(:\w*)?\s*(,|$)', keep):  # asked for by name
            raise BertfeatError(f"{opt('keep', keep, cli=repr(keep))} names the column that has no name, and a kept "
                                "column keeps its name in the output",
                                "name that column in the input (pandas writes its index without a name: "
                                "df.to_csv(index_label='id')), or keep the other columns only")
        raise BertfeatError(f"{opt('keep', keep, cli=repr(keep))} holds an empty column name",
                            "separate the column names with single commas, e.g. label,split")
    for n in dict.fromkeys(names):
        if names.count(n) > 1:
            raise BertfeatError(f"{opt('keep')} names the column '{n}' {names.count(n)} times", "name each column once")
    return pairs


def parse_keep(text: str) -> list[tuple[str, str | None]]:
    """``keep`` as text -> (column name, type name or None) pairs. Read as a CSV line: names separated by commas; a name
    in double quotes is taken as it is (a double quote in it doubled: ``"a,b"``, ``"x""y"`` for x"y); a name may end in
    ``:TYPE`` (``int``, ``float``, ``bool``, ``str``: ``label:int``, ``"a,b":str``), and an unquoted name whose text
    after its last colon is no type name is that whole text (``time:utc``)."""
    from ..readers.kept import TYPE_NAMES

    def refuse(what: str, how: str):
        raise BertfeatError(f"{opt('keep', text, cli=shlex.quote(text))}: {what}", how)

    pairs, i = [], 0
    while True:
        if text.startswith('"', i):
            name, k = _quoted_name(text, i, refuse)
            end = text.find(",", k)
            rest = text[k:] if end < 0 else text[k:end]
            if rest and (not rest.startswith(":") or rest[1:] not in TYPE_NAMES):
                refuse(f"{rest!r} follows the quoted name {name!r}",
                       "end a quoted name with its quote, or with a type: :int, :float, :bool or :str")
            pairs.append((name, rest[1:] or None))
        else:
            end = text.find(",", i)
            item = text[i:] if end < 0 else text[i:end]
            if '"' in item:
                refuse(f"the name {item!r} holds a double quote",
                       'quote the whole name and double the quote in it, as in CSV: "x""y" for x"y')
            name, _, typ = item.rpartition(":")
            pairs.append((name, typ) if name and typ in TYPE_NAMES else (item, None))
        if end < 0:
            return pairs
        i = end + 1


def _quoted_name(text: str, i: int, refuse) -> tuple[str, int]:
    """The name quoted from ``text[i]`` (a double quote) to the quote that is not doubled, and where after it the text
    goes on; an unclosed quote is refused."""
    parts, j = [], i + 1
    while True:
        k = text.find('"', j)
        if k < 0:
            refuse(f"the quote at character {i} is never closed", 'close it: "a,b",label')
        parts.append(text[j:k])
        if not text.startswith('"', k + 1):
            return '"'.join(parts), k + 1
        j = k + 2


# --------------------------------------------------------------------------- the declarations
READER = "by the reader, as it opens the input (readers.open_input)"
SPEC = "against the model, by Encoder.spec (encoder_setup.feature_settings)"
SWITCH = "a switch: True or False (1 / 0 too; a string is refused by check_types)"


@dataclass(frozen=True, kw_only=True)
class ExtractOptions:
    """Every option of ``bertfeat.extract`` (and ``bertfeat extract``), as given; see the module docstring."""

    input: str | os.PathLike = option(check=check_input)
    output: str | os.PathLike | None = option(None, checked_by="with the format and engine (checks.check_output_name)")
    text_column: str | None = option(None, checked_by=READER)
    pair_column: str | None = option(None, checked_by=READER)
    id_column: str | None = option(None, checked_by=READER)
    input_format: str | None = option(None, checked_by=READER)
    encoding: str = option("utf-8", checked_by=READER)
    delimiter: str | None = option(None, checked_by=READER)
    model: str | os.PathLike | None = option(None, checked_by="as the model loads (model.hub.resolve_model)")
    pooling: str | None = option(None, checked_by=SPEC)
    layers: str | None = option(None, checked_by=SPEC)
    layer_agg: str = option("mean", checked_by=SPEC)
    normalize: bool | None = option(None, checked_by=SPEC)
    prompt: str | None = option(None, checked_by=SPEC)
    prompt_name: str | None = option(None, checked_by=SPEC)
    truncate_dim: int | None = option(None, check_truncate_dim)  # its upper bound, the width: by Encoder.spec
    max_length: int | None = option(None, check_max_length)
    max_batch_tokens: int | None = option(None, check_max_batch_tokens)
    long_text: str = option("truncate", checked_by=SPEC)
    stride: int | None = option(None, checked_by="with long_text (checks.check_stride), then " + SPEC)
    precision: str = option("fp32", check_precision)
    pca: int | float | str | None = option(None, parse_pca)
    pca_model: str | os.PathLike | None = option(None, check_pca_model_file)
    format: str | None = option(None, check_format)
    wide: bool = option(False, checked_by="with the format (plan._engine_settings)")
    on_bad_row: str | None = option(None, check_on_bad_row)
    max_bad_rows: int | str | None = option(None, check_max_bad_rows)
    resume: bool = option(False, checked_by=SWITCH)
    overwrite: bool = option(False, checked_by=SWITCH)
    chunk_rows: int = option(DEFAULT_CHUNK_ROWS, check_chunk_rows)
    threads: int | None = option(None, check_threads)
    engine: str = option("local", check_engine)
    scheduler: str | None = option(None, checked_by="with engine dask only (plan)")
    workers: int | None = option(None, check_workers)
    blocksize: int | str | None = option(DEFAULT_BLOCKSIZE, parse_blocksize)
    encoder_options: Mapping[str, Any] | None = option(None, checked_by="merged into the encoder's options "
                                                       "(plan.encoder_settings)", cli=False)
    command: str | None = option(None, checked_by="kept as given, in the provenance", cli=False)
    keep: str | Sequence[str] | Mapping[str, str | None] | None = option(None, keep_columns)
    cache: str | os.PathLike | bool | None = option(None, check_cache)
    label: str | None = option(None, check_label)
    dtype: str = option("float32", check_dtype)
    estimate: bool | int = option(False, check_estimate)
    max_field_bytes: int | str = option(DEFAULT_MAX_FIELD_BYTES, parse_max_field_bytes)

    def checked(self, name: str, value: Any = dataclasses.MISSING) -> Any:
        """Option ``name``'s value (or ``value`` given for it) through its declared check."""
        return check(name, getattr(self, name) if value is dataclasses.MISSING else value)


#: name -> the option's declaration (a dataclass field: default, metadata check / checked_by / cli)
OPTIONS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(ExtractOptions)}


def check(name: str, value: Any) -> Any:
    """``value`` of option ``name`` through its declared check (as given when it has none)."""
    fn = OPTIONS[name].metadata["check"]
    return value if fn is None else fn(value)


#: how an error names a declared type (a class of an option's type hint)
_TYPE_WORDS = {str: "a string", os.PathLike: "a path", bool: "True or False", int: "a whole number", float: "a number",
               collections.abc.Mapping: "a dict", collections.abc.Sequence: "a list"}


#: options whose own check says what a value of another type means and takes more than the type hint says (input:
#: Encoder for texts in memory; the Encoder's sizes and layers: as Encoder(...) takes them, an int, a list or a slice
#: of layers; pca: a Decimal fraction; blocksize: 1e6 bytes)
_TYPED_BY_CHECK = ("input", "keep", "threads", "max_length", "max_batch_tokens", "layers", "pca", "blocksize", "dtype")


def _classes(hint) -> tuple:
    """The classes of a type hint: ``str | os.PathLike | None`` -> (str, os.PathLike, NoneType); a generic
    (``Mapping[str, Any]``) by its origin."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    return tuple(typing.get_origin(a) or a for a in args)


_NOT = object()  # _as_declared: the value is of none of the declared classes


def _as_declared(value, classes: tuple):
    """``value`` as one of ``classes`` (a NumPy scalar as the Python number it holds; a switch may be 0 / 1, None
    is off), or _NOT when it is none of them."""
    if hasattr(value, "dtype") and getattr(value, "shape", None) == () and hasattr(value, "item"):
        value = value.item()  # np.int64(10) -> 10, np.bool_(True) -> True, np.float32(0.5) -> 0.5
    if bool in classes and int not in classes:  # a switch: overwrite=1, resume=None (off) as before
        if value is None:
            return None if type(None) in classes else False
        if isinstance(value, numbers.Integral) and value in (0, 1):
            return bool(value)
    if isinstance(value, bool):  # where a count is declared, its own check refuses a bool (pca=True: not a size)
        return value if bool in classes or int in classes else _NOT
    if isinstance(value, numbers.Integral) and int in classes:
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral) and float in classes:
        return float(value)
    return value if value is None or isinstance(value, classes) else _NOT


def check_types(options: ExtractOptions) -> ExtractOptions:
    """Every option's value against its declared type, before any check reads it (a string where a switch belongs,
    ``overwrite="False"``, would otherwise count as true): -> the options with NumPy scalars as Python's (and a
    switch's 0 / 1 as False / True), or the error naming the first option of a wrong type. None is left to each
    option's own check (most take it as their default)."""
    hints = typing.get_type_hints(ExtractOptions)
    changed = {}
    for name in OPTIONS:
        value, classes = getattr(options, name), _classes(hints[name])
        if int in classes and float not in classes:  # a count: 16.0 is 16 for every one of them
            whole = whole_number(name, value, classes)
            if whole is not value:
                value = changed[name] = whole
        if Any in classes or name in _TYPED_BY_CHECK:
            continue
        kept = _as_declared(value, classes)
        if kept is _NOT:
            raise type_error(name, value, classes)
        if kept is not value:
            changed[name] = kept
    return dataclasses.replace(options, **changed) if changed else options


def whole_number(name: str, value, classes: tuple):
    """A value of an option declared a whole number (``chunk_rows``, ``max_length``, ``threads`` ...): a float (NumPy's
    too) that is one as that int (``chunk_rows=2.0``: 2, as ``max_length=16.0`` was taken), another float refused
    alike for every such option; True / False refused where no switch is declared (``stride=True`` was read as 1,
    ``blocksize=True`` as one byte). Anything else as it is, for the option's type and check."""
    if hasattr(value, "dtype") and getattr(value, "shape", None) == () and hasattr(value, "item"):
        value = value.item()  # np.float64(2.0) -> 2.0, np.int64(2) -> 2 (blocksize=np.int64(...) raised AttributeError)
    if bool not in classes:
        refuse_bool(value, name, _whole_fix(name, classes))
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        if not (math.isfinite(value) and float(value).is_integer()):
            raise BertfeatError(f"{opt(name, value)} is not a whole number", _whole_fix(name, classes))
        return int(value)
    return value


#: what an option that takes a whole number or a string takes as a string, for its fix
_AS_STRING = {"max_bad_rows": "'1%'", "max_field_bytes": "'4MiB'", "blocksize": "'8MiB'"}


def _whole_fix(name: str, classes: tuple) -> str:
    text = f" or a string such as {_AS_STRING[name]}" if name in _AS_STRING else " or True" if bool in classes else ""
    return f"give {opt(name)} as a whole number{text}" + (", or leave it out" if type(None) in classes else "")


def type_error(name: str, value, classes: tuple) -> BertfeatError:
    """The error of a value of another type than ``classes``, naming the option."""
    words = " or ".join(w for c, w in _TYPE_WORDS.items() if c in classes)
    none = type(None) in classes
    fix = f"give {opt(name)} as {words}" + (", or leave it out" if none else "")
    if name == "pca_model" and callable(getattr(value, "save", None)):  # a fitted bertfeat.PCA: its file is what runs
        fix += " (a fitted PCA: PCA.save('pca.npz') first, then pca_model='pca.npz')"
    return BertfeatError(f"{opt(name, value)} is {kind_of(value)}, not {words}"
                         + (", or None" if none else ""), fix)


def check_switch(name: str, value, default: bool = False) -> bool:
    """A switch that is no option of the run (``quiet``) checked as the options' switches are: -> True or False
    (None: ``default``, the switch's own, as None is a switch option's default)."""
    if value is None:
        return default
    kept = _as_declared(value, (bool,))
    if kept is _NOT:
        raise type_error(name, value, (bool,))
    return kept


def options_from(func: str, given: Mapping[str, Any], allowed: Sequence[str], **defaults) -> ExtractOptions:
    """ExtractOptions of ``given`` keywords, each one of ``allowed`` (a TypeError naming ``func`` otherwise, as
    Python's for an unknown keyword); ``defaults``: the caller's own defaults for options it leaves out."""
    for name in given:
        if name not in allowed:
            raise TypeError(f"{func}() got an unexpected keyword argument {name!r}")
    return ExtractOptions(**{**defaults, **given})


# --------------------------------------------------------------------------- what the encoder reads of them
def encoder_keywords(source) -> dict:
    """The Encoder's load keywords of ``source`` (ExtractOptions, or any object with the same names: TextFeatures),
    those given: None leaves the Encoder's default."""
    values = {name: getattr(source, name) for name in ENCODER_OPTIONS}
    return {k: v for k, v in values.items() if v is not None}


def feature_spec(encoder, source):
    """The FeatureSpec of ``source``'s feature options (ExtractOptions, or TextFeatures: the same names), checked
    against the model (Encoder.spec)."""
    return encoder.spec(source.pooling, source.layers, source.layer_agg, source.normalize, source.max_length,
                        source.long_text, source.stride, prompt=source.prompt, prompt_name=source.prompt_name,
                        truncate_dim=source.truncate_dim, pairs=getattr(source, "pair_column", None) is not None)
