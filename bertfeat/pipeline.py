"""`bertfeat extract`: input rows -> validated chunks -> features -> output files.

The unit of work is a *chunk*: ``chunk_rows`` consecutive input rows (by 0-based data-row
number). One function, ``encode_chunk``, turns a chunk into an Arrow table of features; the
local engine below and the Dask engine (dask_engine.py) both call it.

Local engine: a background thread reads, validates and tokenizes chunk k+1 while the model
encodes chunk k. Each finished chunk is written atomically as a part file under
``OUTPUT.partial/`` with a manifest of the settings, so ``--resume`` after Ctrl-C or kill -9
continues from the last completed chunk. Each chunk's counts and PCA statistics are taken while its
table is in memory; at the end the PCA is fitted, the parts are read back once and streamed into the
output (temporary file, then rename) and the partial directory is removed. The rules both engines share
(options, manifest and resume, counts, the PCA's fit and files) are in jobcore.py.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from . import __version__, gemm
from .encoder import Encoder, FeatureSpec, LongTextError
from .errors import BertfeatError, InputError, opt
from .jobcore import (COUNT_KEYS, accumulate_pca, check_job_options, check_resume, feature_matrix, finish_pca, job_manifest, new_pca,
                      read_manifest, table_counts)
from .readers import RawBatch, Reader, open_input
from .threads import read_ahead

OUTPUT_FORMATS = ("parquet", "npy", "csv")
DEFAULT_CHUNK_ROWS = 2048
READ_AHEAD_CHUNKS = 2  # tokenized chunks waiting for the model (bounds the memory of the read-ahead)


# --------------------------------------------------------------------------- validation
def _decode(value, what: str, encoding: str = "utf-8") -> tuple[str | None, str | None]:
    """A raw cell -> (text, None) or (None, reason it is rejected)."""
    if value is None:
        return None, f"null {what}"
    if isinstance(value, (bytes, bytearray)):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError as e:
            return None, f"invalid UTF-8 at byte {e.start} of the {what}"
    if isinstance(value, float) and value != value:
        return None, f"null {what} (NaN)"
    if not isinstance(value, str):
        return None, f"non-string {what} ({_kind(value)} {value!r:.40})"
    if not value:
        return None, f"empty {what}"
    if not value.strip():
        return None, f"whitespace-only {what}"
    from .textcheck import control_character_reason

    reason = control_character_reason(value, what)
    return (None, reason) if reason else (value, None)


def _kind(v) -> str:
    return {bool: "boolean", int: "number", float: "number", dict: "object", list: "array"}.get(type(v), type(v).__name__)


# A row over max length under long_text="error" is rejected with this reason tag (in the rejects file as it is;
# in an error message the option is named for the caller: long_text='error' / --long-text error).
LONG_TEXT_TAG = "(--long-text error)"


def fix_for(reason: str) -> str:
    """How to fix a bad row, by its reason (options named with errors.opt)."""
    skip = f"or pass {opt('on_bad_row', 'skip')} to write it to the rejects file and go on"
    if reason.endswith("(a binary Parquet column)"):
        return (f"write the column as UTF-8 strings (decode it with its real encoding first; {opt('encoding')} applies to "
                f"CSV and JSONL), {skip}")
    if reason.startswith("invalid UTF-8") or reason.startswith("invalid ") and " at byte " in reason:
        return f"pass {opt('encoding')} with the file's encoding (e.g. {opt('encoding', 'latin-1')}), {skip}"
    if reason.startswith("control character"):
        return f"remove the control characters or replace them with spaces, {skip}"
    if reason.startswith("unclosed quote"):
        return f'close the quote (a quote inside a quoted field is written ""), {skip}'
    if reason.startswith("malformed line"):
        return f"fix the line (quote fields that hold the delimiter), {skip}"
    if reason.startswith("invalid JSON"):
        return f"fix the line (one JSON object per line), {skip}"
    if LONG_TEXT_TAG in reason:
        return (f"use {opt('long_text', 'truncate')}/chunk-mean/chunk-max or a larger {opt('max_length')}, "
                f"or {opt('on_bad_row', 'skip')}")
    return f"fix the row, {skip}"


def _id_value(v):
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("utf-8", errors="replace")
    return v


@dataclass
class Chunk:
    """Validated rows of one chunk, ready to tokenize."""

    index: int
    rows: list[int]  # accepted 0-based data-row numbers
    texts: list[str]
    pairs: list[str] | None
    ids: list | None
    rejects: list[dict]  # {"row", "id", "reason"}
    n_read: int  # input rows in the chunk, accepted or not
    bytes_read: int = 0


def validate_batch(b: RawBatch, chunk_index: int) -> Chunk:
    """Split raw rows into accepted texts and rejects (row, id, reason)."""
    rows, texts, pairs, ids, rejects = [], [], [] if b.pairs is not None else None, [] if b.ids is not None else None, []
    for k, row in enumerate(b.rows):
        ident = _id_value(b.ids[k]) if b.ids is not None else None
        reason = b.pre_rejected.get(row)
        text = pair = None
        if reason is None:
            text, reason = _decode(b.texts[k], "text")
        if reason is None and b.pairs is not None:
            pair, reason = _decode(b.pairs[k], "pair text")
        if reason is None and b.ids is not None and ident is None:
            reason = "null id"
        if reason is not None:
            rejects.append({"row": row, "id": ident, "reason": reason})
            continue
        rows.append(row); texts.append(text)
        if pairs is not None: pairs.append(pair)
        if ids is not None: ids.append(ident)
    return Chunk(chunk_index, rows, texts, pairs, ids, rejects, len(b.rows), b.bytes_read)


def iter_chunks(source: Reader, chunk_rows: int):
    """Re-cut the reader's batches into chunks of exactly chunk_rows input rows (the last may be short)."""
    buf: list[RawBatch] = []
    have = 0
    index = 0

    def cut(batches: list[RawBatch], n: int) -> tuple[RawBatch, list[RawBatch]]:
        rows, texts, pairs, ids, pre = [], [], [], [], {}
        rest = []
        for b in batches:
            take = min(n - len(rows), len(b.rows))
            if take <= 0:
                rest.append(b); continue
            rows += b.rows[:take]; texts += b.texts[:take]
            if b.pairs is not None: pairs += b.pairs[:take]
            if b.ids is not None: ids += b.ids[:take]
            pre.update({r: v for r, v in b.pre_rejected.items() if r in set(b.rows[:take])})
            end = b.bytes_read
            if take < len(b.rows):  # the chunk ends inside this batch: its bytes pro rata (a smooth progress by bytes)
                end = b.bytes_start + (b.bytes_read - b.bytes_start) * take // len(b.rows)
                rest.append(RawBatch(b.rows[take:], b.texts[take:], None if b.pairs is None else b.pairs[take:],
                                     None if b.ids is None else b.ids[take:],
                                     {r: v for r, v in b.pre_rejected.items() if r in set(b.rows[take:])}, b.bytes_read, end))
        last = batches[-1]
        return RawBatch(rows, texts, pairs if last.pairs is not None else None, ids if last.ids is not None else None,
                        pre, end, batches[0].bytes_start), rest

    for b in source.batches():
        buf.append(b)
        have += len(b.rows)
        while have >= chunk_rows:
            raw, buf = cut(buf, chunk_rows)
            have -= len(raw.rows)
            yield index, raw
            index += 1
    if have:
        raw, buf = cut(buf, have)
        yield index, raw


# --------------------------------------------------------------------------- one chunk
@dataclass
class PreparedChunk:
    chunk: Chunk
    prepared: object  # encoder.Prepared or None when the chunk has no accepted row


def prepare_chunk(encoder: Encoder, spec: FeatureSpec, chunk: Chunk, source_name: str, on_bad_row: str) -> PreparedChunk:
    """Tokenize a chunk; under --long-text error an over-long row is a bad row.

    Under ``--on-bad-row error`` the first bad row of the chunk (lowest row number, whatever
    its reason) raises ``FILE row N: reason - fix``.
    """
    if on_bad_row == "error" and chunk.rejects and spec.long_text != "error":
        _raise_bad_row(source_name, chunk.rejects[0])
    prepared = None
    while chunk.rows:
        try:
            prepared = encoder.prepare(chunk.texts, chunk.pairs, spec)
            break
        except LongTextError as e:
            bad = sorted(set(e.rows.tolist()))
            tok = encoder.tokenizer.encode([chunk.texts[i] for i in bad],
                                           None if chunk.pairs is None else [chunk.pairs[i] for i in bad], spec.max_length)
            chunk.rejects += [{"row": chunk.rows[i], "id": None if chunk.ids is None else chunk.ids[i],
                               "reason": f"{int(n)} tokens, more than max length {spec.max_length} {LONG_TEXT_TAG}"}
                              for i, n in zip(bad, tok.n_tokens)]
            chunk.rejects.sort(key=lambda r: r["row"])
            if on_bad_row == "error":
                break
            keep = [i for i in range(len(chunk.rows)) if i not in set(bad)]
            chunk.rows = [chunk.rows[i] for i in keep]
            chunk.texts = [chunk.texts[i] for i in keep]
            if chunk.pairs is not None: chunk.pairs = [chunk.pairs[i] for i in keep]
            if chunk.ids is not None: chunk.ids = [chunk.ids[i] for i in keep]
    if on_bad_row == "error" and chunk.rejects:
        _raise_bad_row(source_name, chunk.rejects[0])
    return PreparedChunk(chunk, prepared if chunk.rows else None)


def _raise_bad_row(source_name: str, r: dict):
    reason = r["reason"].replace(LONG_TEXT_TAG, f"({opt('long_text', 'error')})")
    raise InputError(f"{source_name} row {r['row']}: {reason}", fix_for(r["reason"]))


def chunk_table(encoder: Encoder, spec: FeatureSpec, pc: PreparedChunk, id_name: str) -> pa.Table:
    """Run the model on a prepared chunk -> Arrow table: id, embedding, n_tokens, truncated, n_chunks."""
    chunk, prep = pc.chunk, pc.prepared
    D = encoder.output_dim(spec)
    if prep is None:
        X = np.zeros((0, D), dtype=np.float32)
        n_tok, trunc, n_ch = np.zeros(0, np.int32), np.zeros(0, bool), np.zeros(0, np.int32)
    else:
        X = encoder.run(prep, spec)
        n_tok, trunc, n_ch = prep.n_tokens.astype(np.int32), prep.truncated, prep.n_chunks.astype(np.int32)
    ids = pa.array(chunk.rows, pa.int64()) if chunk.ids is None else pa.array(chunk.ids)
    emb = pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1), pa.float32()), D)
    return pa.table({id_name: ids, "embedding": emb, "n_tokens": pa.array(n_tok), "truncated": pa.array(trunc),
                     "n_chunks": pa.array(n_ch)})


def encode_chunk(encoder: Encoder, spec: FeatureSpec, chunk: Chunk, source_name: str, on_bad_row: str,
                 id_name: str) -> tuple[pa.Table, list[dict]]:
    """One chunk end to end (the function the Dask engine calls): -> (features table, rejects)."""
    pc = prepare_chunk(encoder, spec, chunk, source_name, on_bad_row)
    return chunk_table(encoder, spec, pc, id_name), pc.chunk.rejects


# --------------------------------------------------------------------------- options & summary
@dataclass
class ExtractOptions:
    input: str
    output: str | None = None
    text_column: str | None = None
    pair_column: str | None = None
    id_column: str | None = None
    input_format: str | None = None
    encoding: str = "utf-8"
    model: str | None = None
    pooling: str | None = None
    layers: str | None = None
    layer_agg: str = "mean"
    normalize: bool | None = None  # None: as the model's pipeline (its Normalize module)
    prompt: str | None = None
    prompt_name: str | None = None
    max_length: int | None = None
    max_batch_tokens: int | None = None
    long_text: str = "truncate"
    stride: int | None = None
    pca: str | None = None  # "100" or "0.95"
    format: str | None = None
    wide: bool = False
    on_bad_row: str = "error"
    resume: bool = False
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    threads: int | None = None
    command: str | None = None
    precision: str = "fp32"  # "bf16": Encoder(precision="bf16"), see docs/precision.md
    overwrite: bool = False  # replace existing outputs (else refused), or start over from a partial run
    delimiter: str | None = None  # CSV field delimiter (default: from the header line)
    encoder_options: dict = field(default_factory=dict)  # further Encoder(...) keywords


@dataclass
class ExtractSummary:
    rows_read: int = 0
    rows_written: int = 0
    rows_rejected: int = 0
    rows_truncated: int = 0
    rows_chunked: int = 0
    rows_multiline: int = 0  # CSV rows whose quoted fields span lines
    tokens: int = 0  # tokens of accepted rows before truncation
    tokens_dropped: int = 0
    elapsed: float = 0.0
    chunks_resumed: int = 0
    outputs: dict = field(default_factory=dict)
    dim: int = 0

    def add(self, counts: dict):
        """Add a unit of work's counts (table_counts keys, plus rows_read when given)."""
        for k in ("rows_read", *COUNT_KEYS):
            if k in counts:
                setattr(self, k, getattr(self, k) + int(counts[k]))
    pooling: str = ""
    model: str = ""

    @property
    def rows_per_s(self) -> float:
        return self.rows_written / self.elapsed if self.elapsed else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.elapsed if self.elapsed else 0.0

    def to_dict(self) -> dict:
        d = {k: v for k, v in vars(self).items()}
        d["outputs"] = {k: str(v) for k, v in self.outputs.items()}
        d["rows_per_s"] = round(self.rows_per_s, 2)
        d["tokens_per_s"] = round(self.tokens_per_s, 2)
        return d


class NullProgress:
    """Progress sink interface: the CLI passes a rich or a plain-log implementation."""

    def start(self, total_rows: int | None, total_bytes: int | None): ...
    def advance(self, rows: int, tokens: int, bytes_read: int): ...
    def note(self, message: str): ...
    def parts(self, done: int, in_flight: int, total: int): ...  # Dask: partitions finished / on workers now / in all
    def stop(self): ...


# --------------------------------------------------------------------------- output paths
def default_output(input_path: str, fmt: str) -> Path:
    if input_path == "-":
        raise InputError(f"reading standard input needs {opt('output', 'OUTPUT')}", f"add {opt('output', 'features.parquet')}")
    p = Path(input_path.rstrip("/"))
    if any(ch in input_path for ch in "*?["):
        # a glob: name the output after the directory above the first wildcard, beside that directory
        parts = list(_until_glob(Path(input_path).parts))
        p = Path(*parts) if parts else Path("dataset")
        if not p.name:
            p = Path("dataset")
    stem = p.name
    for suf in (".gz", ".bz2", ".zst", ".csv", ".tsv", ".tab", ".parquet", ".pq", ".jsonl", ".ndjson", ".json"):
        if stem.lower().endswith(suf):
            stem = stem[: -len(suf)]
    return p.parent / f"{stem}.features.{fmt}"


def _until_glob(parts):
    for part in parts:
        if any(ch in part for ch in "*?["):
            return
        yield part


def output_format(output: Path | None, fmt: str | None) -> str:
    if fmt:
        if fmt not in OUTPUT_FORMATS:
            raise BertfeatError(f"unknown output format '{fmt}'", f"choose one of {', '.join(OUTPUT_FORMATS)}")
        return fmt
    if output is not None and output.suffix.lower().lstrip(".") in OUTPUT_FORMATS:
        return output.suffix.lower().lstrip(".")
    return "parquet"


# --------------------------------------------------------------------------- resume state
class PartStore:
    """OUTPUT.partial/: a manifest plus one atomically written Parquet part per finished chunk."""

    def __init__(self, output: Path):
        self.dir = output.with_name(output.name + ".partial")
        self.manifest_path = self.dir / "manifest.json"

    def part_path(self, index: int) -> Path:
        return self.dir / f"part-{index:06d}.parquet"

    def open(self, manifest: dict, resume: bool) -> set[int]:
        """Start or continue: returns the indices of chunks already done."""
        if self.dir.exists() and resume and self.manifest_path.is_file():
            check_resume(read_manifest(self.manifest_path), manifest)
            return {int(p.stem.split("-")[1]) for p in self.dir.glob("part-*.parquet")}
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True)
        _atomic_write_text(self.manifest_path, json.dumps(manifest, indent=2, sort_keys=True))
        return set()

    def write_part(self, index: int, table: pa.Table, rejects: list[dict], n_read: int):
        meta = {b"bertfeat_part": json.dumps({"rejects": rejects, "n_read": n_read}, default=str).encode()}
        table = table.replace_schema_metadata(meta)
        path = self.part_path(index)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        pq.write_table(table, tmp)
        _fsync_file(tmp)
        os.replace(tmp, path)

    def read_part(self, index: int) -> tuple[pa.Table, list[dict], int]:
        t = pq.read_table(self.part_path(index))
        meta = json.loads(t.schema.metadata[b"bertfeat_part"])
        return t.replace_schema_metadata(None), meta["rejects"], meta["n_read"]

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def _fsync_file(path: Path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write_text(path: Path, text: str):
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def publish_rejects(out_path: Path, rejects: list[dict]) -> dict:
    """OUTPUT.rejects.csv when there are rejects (else remove a stale one): -> {"rejects": path} or {}."""
    path = out_path.with_name(out_path.name + ".rejects.csv")
    if rejects:
        write_rejects(path, rejects)
        return {"rejects": path}
    if path.exists():
        path.unlink()
    return {}


def write_rejects(path: Path, rejects: list[dict]):
    """OUTPUT.rejects.csv: row, id, reason (written atomically)."""
    import csv
    import io as _io

    buf = _io.StringIO()
    w = csv.writer(buf)
    w.writerow(["row", "id", "reason"])
    for r in rejects:
        w.writerow([r["row"], "" if r["id"] is None else r["id"], r["reason"]])
    _atomic_write_text(path, buf.getvalue())


# --------------------------------------------------------------------------- the job
def _prepared_chunks(source: Reader, opts: ExtractOptions, encoder: Encoder, spec: FeatureSpec, done: set[int]):
    """Read, validate and tokenize (run ahead of the model by read_ahead); completed chunks pass through untokenized.

    Yields ("done", index, bytes_read, rows) for a chunk already in the part store, else ("chunk", PreparedChunk).
    """
    for index, raw in iter_chunks(source, opts.chunk_rows):
        if index in done:
            yield ("done", index, raw.bytes_read, len(raw.rows))
            continue
        chunk = validate_batch(raw, index)
        yield ("chunk", prepare_chunk(encoder, spec, chunk, source.name, opts.on_bad_row))


def extract(opts: ExtractOptions, progress: NullProgress | None = None, encoder: Encoder | None = None) -> ExtractSummary:
    """Run the whole job; returns the summary. Raises BertfeatError on bad input or settings."""
    progress = progress or NullProgress()
    t0 = time.perf_counter()
    n_components = check_job_options(opts)
    if opts.resume and opts.input == "-":
        raise BertfeatError(f"{opt('resume', True)} cannot continue a run that read standard input", "write the input to a file first")
    if opts.input == "-" and not opts.output:
        default_output(opts.input, "parquet")  # raises: standard input needs -o
    source = open_input(opts.input, opts.input_format, opts.text_column, opts.pair_column, opts.id_column, opts.encoding,
                        delimiter=opts.delimiter)
    out_path = Path(opts.output) if opts.output else None
    fmt = output_format(out_path, opts.format)
    out_path = out_path or default_output(opts.input, fmt)
    if out_path.is_dir():
        raise BertfeatError(f"the output {out_path} is a directory",
                            f"pass {opt('output')} with a file name, e.g. {opt('output', 'features.parquet')}")
    if opts.input != "-" and any(out_path.resolve() == Path(f).resolve() for f in source.files):
        raise BertfeatError(f"the output {out_path} is the input file", f"pass {opt('output')} with another file name")
    if opts.wide and fmt == "npy":
        raise BertfeatError(f"{opt('wide', True)} applies to Parquet output, not npy",
                            f"drop {opt('wide')}, or use {opt('format', 'parquet')}")
    from .safety import check_extract_outputs
    from .specs import check_max_length, check_output_format, check_size

    check_output_format(opts.output, opts.format)
    check_max_length(opts.max_length)
    check_size(opts.max_batch_tokens, "max_batch_tokens", 1, None, " (tokens per batch, padded rows x length; default 512)")
    check_extract_outputs(out_path, fmt, n_components is not None, PartStore(out_path).dir, source.files, opts.overwrite,
                          opts.resume)
    encoder = encoder or Encoder(opts.model, precision=opts.precision, **opts.encoder_options)
    if opts.precision not in (encoder.precision, encoder.requested_precision):  # never a silent change of precision
        raise BertfeatError(f"the encoder was loaded in {encoder.precision}, but precision {opts.precision} was asked for",
                            f"load it with Encoder(..., precision={opts.precision!r})")
    if opts.max_batch_tokens:
        encoder.max_batch_tokens = int(opts.max_batch_tokens)
    if opts.threads:
        encoder.threads = int(opts.threads)
    spec, id_name, fingerprint = feature_settings(encoder, opts, n_components)
    manifest = job_manifest(source, opts, fingerprint, format=fmt)
    store = PartStore(out_path)
    try:
        done = store.open(manifest, opts.resume)
    except OSError as e:
        store.remove()
        raise BertfeatError(f"cannot write {store.dir} ({e.strerror or e})",
                            f"check the output directory exists and is writable, or pass {opt('output')}") from None
    for stale in (*out_path.parent.glob(f".{out_path.name}*.tmp-*"), *out_path.parent.glob(f".{out_path.stem}.ids.csv.tmp-*")):
        stale.unlink(missing_ok=True)  # temporaries of a run killed while it wrote the output
    summary = ExtractSummary(chunks_resumed=len(done), pooling=spec.pooling, model=encoder.model_id, dim=encoder.output_dim(spec))
    if done:
        progress.note(f"resuming: {len(done)} chunk(s) already done in {store.dir}")

    progress.start(source.total_rows, source.total_bytes)
    items = read_ahead(_prepared_chunks(source, opts, encoder, spec, done), READ_AHEAD_CHUNKS, name="bertfeat-reader")
    order: list[int] = []
    rejects: dict[int, list[dict]] = {}
    pca = new_pca(n_components) if n_components is not None else None

    def account(index: int, table: pa.Table, chunk_rejects: list[dict], n_read: int):
        """A finished unit's counts, rejects and PCA statistics, taken while its table is in memory."""
        order.append(index)
        rejects[index] = chunk_rejects
        summary.add({"rows_read": n_read, **table_counts(table, spec.max_length)})
        if pca is not None and table.num_rows:
            accumulate_pca(pca, feature_matrix(table))

    try:
        for item in items:
            if item[0] == "done":  # finished by the interrupted run: its part is read once, here
                _, index, bytes_read, n = item
                account(index, *store.read_part(index))
                progress.advance(n, 0, bytes_read)
                continue
            pc: PreparedChunk = item[1]
            table = chunk_table(encoder, spec, pc, id_name)
            store.write_part(pc.chunk.index, table, pc.chunk.rejects, pc.chunk.n_read)
            account(pc.chunk.index, table, pc.chunk.rejects, pc.chunk.n_read)
            tokens = int(pc.prepared.n_tokens.sum()) if pc.prepared is not None else 0
            progress.advance(pc.chunk.n_read, tokens, pc.chunk.bytes_read)
    except BertfeatError:
        items.close()
        store.remove()  # bad input: leave nothing behind
        raise
    except OSError as e:  # disk full, read-only: the finished chunks stay, --resume continues
        items.close()
        from .safety import os_error

        raise os_error(e, store.dir, f"free disk space, then rerun the same command with {opt('resume', True)} "
                                     f"({len(order)} finished chunk(s) are kept in {store.dir})") from None
    except KeyboardInterrupt:
        items.close()
        progress.stop()
        progress.note(f"interrupted: {len(order)} chunk(s) are kept in {store.dir}; "
                      "run the same command with --resume to continue")
        raise
    finally:
        items.close()
        progress.stop()
    summary.rows_multiline = getattr(source, "multiline_rows", 0)

    try:
        summary.rows_rejected = sum(len(r) for r in rejects.values())
        summary.outputs = finalize(store, sorted(order), out_path, fmt, opts, encoder, spec, fingerprint, source, summary,
                                   pca, [r for i in sorted(rejects) for r in rejects[i]], id_name)
    except BertfeatError:
        store.remove()  # e.g. --pca does not fit the data: a rerun with other settings starts over anyway
        raise
    except OSError as e:  # disk full, permissions: the parts stay, so --resume only redoes the writing
        raise BertfeatError(f"cannot write the output {out_path} ({e.strerror or e})",
                            f"free disk space or fix the permissions, then rerun with {opt('resume', True)}") from None
    summary.elapsed = time.perf_counter() - t0
    return summary


def feature_settings(encoder: Encoder, opts: ExtractOptions, n_components) -> tuple[FeatureSpec, str, dict]:
    """Validate the feature options of a run (both engines): -> (spec, id column name, fingerprint)."""
    spec = encoder.spec(opts.pooling, opts.layers, opts.layer_agg, opts.normalize, opts.max_length, opts.long_text, opts.stride,
                        prompt=opts.prompt, prompt_name=opts.prompt_name)
    if isinstance(n_components, int) and n_components > encoder.output_dim(spec):
        raise BertfeatError(f"{opt('pca', n_components)} is more components than the {encoder.output_dim(spec)} feature dimensions",
                            f"choose {opt('pca', encoder.output_dim(spec))} or fewer, or a variance fraction such as 0.95")
    id_name = opts.id_column or "row"
    if id_name in ("embedding", "n_tokens", "truncated", "n_chunks"):
        shown = opt("id_column", id_name, cli=f"'{id_name}'")
        raise BertfeatError(f"{shown} clashes with an output column", "rename the id column")
    return spec, id_name, encoder.fingerprint(spec)


def provenance(encoder: Encoder, spec: FeatureSpec, fingerprint: dict, source: Reader, opts: ExtractOptions,
               summary: ExtractSummary) -> dict:
    return {
        "bertfeat_version": __version__,
        "model": encoder.model_id,
        "model_source": encoder.location.source,
        "weights_sha256": encoder.weights_sha256,
        "fingerprint": fingerprint,
        "precision": encoder.precision,
        "gemm": encoder.gemm_path.to_dict(),
        "pooling": spec.pooling,
        "layers": list(spec.layers),
        "layer_agg": spec.layer_agg,
        "normalize": spec.normalize,
        "dense": list(spec.dense),
        "prompt": spec.prompt,
        "prompt_name": spec.prompt_name,
        "pipeline": encoder.describe(spec),
        "max_length": spec.max_length,
        "long_text": spec.long_text,
        "stride": spec.stride if spec.long_text.startswith("chunk") else None,
        "input": source.path,
        "input_format": source.fmt,
        "text_column": source.text_column,
        "pair_column": source.pair_column,
        "id_column": source.id_column,
        "command": opts.command or " ".join(shlex.quote(a) for a in sys.argv),
        "rows": {"read": summary.rows_read, "written": summary.rows_written, "rejected": summary.rows_rejected,
                 "truncated": summary.rows_truncated, "chunked": summary.rows_chunked},
        "tokens": {"total": summary.tokens, "dropped": summary.tokens_dropped},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "pca": None,
    }


def finalize(store: PartStore, order: list[int], out_path: Path, fmt: str, opts: ExtractOptions, encoder: Encoder,
             spec: FeatureSpec, fingerprint: dict, source: Reader, summary: ExtractSummary, pca, rejects: list[dict],
             id_name: str) -> dict:
    """Fit the accumulated PCA, then stream the parts (each read once) into the output file(s); remove the
    partial directory. The counts and the PCA statistics were taken as each part was made."""
    from .features import FeatureWriter

    meta = provenance(encoder, spec, fingerprint, source, opts, summary)
    outputs: dict[str, Path] = {}
    if pca is not None:
        pca_outputs, meta["pca"] = finish_pca(pca, summary.rows_written, out_path, fingerprint)
        outputs.update(pca_outputs)

    dim = pca.n_components_ if pca is not None else encoder.output_dim(spec)
    id_type = source.id_type()  # the reader's rule, as on the Dask engine
    if id_type is None:
        id_type = pa.string()
        for i in order:  # the first part with an accepted row (a chunk whose rows were all rejected has no id type)
            t = pq.read_schema(store.part_path(i)).field(id_name).type
            if not pa.types.is_null(t):
                id_type = t
                break
    writer = FeatureWriter(out_path, fmt=fmt, dim=int(dim), id_name=id_name,
                           id_type=id_type, metadata=meta, wide=opts.wide,
                           extra_columns={"n_tokens": pa.int32(), "truncated": pa.bool_(), "n_chunks": pa.int32()})
    with writer:
        for i in order:
            t, _, _ = store.read_part(i)
            X = feature_matrix(t)
            if pca is not None and len(X):
                X = pca.transform(X).astype(np.float32)
            writer.write(t.column(id_name).to_pylist(), X,
                         {"n_tokens": t.column("n_tokens").to_numpy(), "truncated": t.column("truncated").to_numpy(zero_copy_only=False),
                          "n_chunks": t.column("n_chunks").to_numpy()})
        outputs["features"] = writer.close()
    outputs.update(publish_rejects(out_path, rejects))
    store.remove()
    return outputs
