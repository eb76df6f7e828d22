"""The local engine: runs an ``ExtractPlan`` (plan.py) in this process.

A background thread reads, validates and tokenizes chunk k+1 while the model encodes chunk k (chunks.py). Each
finished chunk is written atomically as a part file under ``OUTPUT.partial/`` with a manifest of the settings, so
``resume`` after Ctrl-C or kill -9 continues from the last completed chunk. Each chunk's counts and PCA
statistics are taken while its table is in memory; once the last row is read, the input's files are checked against
their identity at the start (manifest.check_input_unchanged: a file that grew meanwhile fails the run); then the PCA
is fitted, the parts are read back once and streamed into the output (temporary file, then rename) and the partial
directory is removed. The rules both
engines share are in their own modules: the model's setup (encoder_setup.py), manifest and resume (manifest.py),
counts (summary.py), provenance (provenance.py), the PCA's fit and files (pca_steps.py); what a failure keeps or
removes and says, in failures.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..atomic import atomic_output, remove_directory, remove_stale_temps, together, uninterrupted, write_atomic
from .chunks import (
    PreparedChunk,
    chunk_table,
    extra_columns,
    feature_matrix,
    iter_chunks,
    output_columns,
    prepare_chunk,
    table_counts,
    validate_batch,
)
from ..errors import BertfeatError, interrupt_in, one_line, opt
from .failures import Failure, handle, kept_for_limit, kind_of
from ..features.base import check_float16_range
from .encoder_setup import feature_settings, load_encoder, make_reuser
from .manifest import (PARTIAL_MANIFESTS, check_input_unchanged, check_resume, check_resume_engine, job_manifest,
                       read_manifest)
from .pca_steps import accumulate_pca, applied_pca, applied_pca_entry, finish_pca, new_pca, probe_into_report
from .provenance import provenance
from .outputs import allow_replacing, mark_finishing, remove_stale
from .plan import check_output_values
from .summary import ExtractSummary, RepeatedIds, RespelledNumbers, new_summary
from .progress import NullProgress
from ..readers.rejects import TooManyBadRows, publish_rejects
from ..ops.threads import read_ahead

READ_AHEAD_CHUNKS = 2  # tokenized chunks waiting for the model (bounds the memory of the read-ahead)


class DamagedPart(BertfeatError):
    """A saved chunk that no longer reads back (its page checksums fail): the run stops, keeping the other parts."""


class PartStore:
    """OUTPUT.partial/: a manifest plus one atomically written Parquet part per finished chunk."""

    def __init__(self, partial: Path):
        self.dir = partial
        self.manifest_path = self.dir / PARTIAL_MANIFESTS["local"]

    def part_path(self, index: int) -> Path:
        return self.dir / f"part-{index:06d}.parquet"

    def kept(self, manifest: dict) -> list[int]:
        """What a resume of this run would keep (``--estimate``, which writes nothing): the indices of the finished
        chunks' parts, once the interrupted run's manifest passes the resume's checks (a ResumeError otherwise, as the
        run would raise); a part is not read back here (one found damaged by the run is encoded again)."""
        check_resume_engine(self.dir, "local", True)
        if not self.manifest_path.is_file():
            return []
        check_resume(read_manifest(self.manifest_path), manifest)
        return sorted(self._parts())

    def _parts(self) -> dict[int, Path]:
        """The parts on disk by chunk index (part_path's names)."""
        return {int(p.stem.split("-")[1]): p for p in self.dir.glob("part-*.parquet")}

    def open(self, manifest: dict, resume: bool) -> set[int]:
        """Start or continue: returns the indices of chunks already done. A store that cannot be made is removed (a
        BertfeatError naming it)."""
        try:
            return self._open(manifest, resume)
        except OSError as e:
            self.remove()
            raise BertfeatError(f"cannot write {self.dir} ({e.strerror or e})",
                                f"check the output directory exists and is writable, or pass {opt('output')}") from None

    def _open(self, manifest: dict, resume: bool) -> set[int]:
        check_resume_engine(self.dir, "local", resume)
        if self.dir.exists() and resume and self.manifest_path.is_file():
            check_resume(read_manifest(self.manifest_path), manifest)
            done = set()
            for index, p in self._parts().items():
                if self._intact(p):
                    done.add(index)
                else:  # damaged on disk since (cut short, emptied): its chunk is encoded again
                    p.unlink()
            return done
        text = json.dumps(manifest, indent=2, sort_keys=True)  # before the directory: a value it cannot write leaves none
        remove_directory(self.dir)  # --overwrite's old run: aside in one step, then deleted (atomic.remove_directory)
        self.dir.mkdir(parents=True)
        write_atomic(self.manifest_path, text)
        return set()

    @staticmethod
    def _intact(path: Path) -> bool:
        """A part's footer and bertfeat's metadata read back (cheap: a resumed run reads each part's pages once, later,
        verifying their checksums: read_part)."""
        try:
            json.loads(pq.read_schema(path).metadata[b"bertfeat_part"])
            return True
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
            return False

    def write_part(self, index: int, table: pa.Table, rejects: list[dict], n_read: int, reuse: dict | None = None,
                   respelled: dict | None = None):
        meta = {b"bertfeat_part": json.dumps({"rejects": rejects, "n_read": n_read, "reuse": reuse or {},
                                              "numbers_respelled": respelled or {}}, default=str).encode()}
        with atomic_output(self.part_path(index)) as tmp:
            pq.write_table(table.replace_schema_metadata(meta), tmp, write_page_checksum=True,  # no dictionary for the
                           use_dictionary=[c for c in table.column_names if c != "embedding"])  # floats (parquet.py)

    def read_part(self, index: int) -> tuple[pa.Table, list[dict], int, dict, dict]:
        """A finished chunk: its table, rejects, input rows, reuse counts (rows_encoded, rows_reused) and its JSONL
        numbers written in other digits (RespelledNumbers.tally)."""
        path = self.part_path(index)
        try:
            t = pq.read_table(path, page_checksum_verification=True)  # the CRCs write_part wrote
        except (OSError, pa.ArrowException) as e:
            path.unlink(missing_ok=True)  # so that the resume this error asks for encodes its chunk again
            raise DamagedPart(f"a saved chunk of the interrupted run, {path.name}, was damaged on disk "
                                f"({one_line(e, 100)}); it is removed",
                                f"rerun with {opt('resume', True)}: that chunk is encoded again") from None
        meta = json.loads(t.schema.metadata[b"bertfeat_part"])
        return (t.replace_schema_metadata(None), meta["rejects"], meta["n_read"], meta.get("reuse", {}),
                meta.get("numbers_respelled", {}))

    def remove(self):
        remove_directory(self.dir)


def prepared_chunks(plan, encoder, spec, done: set[int], reuser=None):
    """Read, validate, look up (``reuser``) and tokenize (run ahead of the model by read_ahead); completed chunks pass
    through untokenized.

    Yields ("done", index, bytes_read, rows: the chunk's input rows) for a chunk already in the part store, else
    ("chunk", PreparedChunk).
    """
    source = plan.reader
    for index, raw in iter_chunks(source, plan.options.chunk_rows):
        if index in done:
            yield ("done", index, raw.bytes_read, raw.rows)
            continue
        chunk = validate_batch(raw, index)
        yield ("chunk", prepare_chunk(encoder, spec, chunk, source.row_label, plan.on_bad_row, reuser))


def run(plan, progress: NullProgress | None = None) -> ExtractSummary:
    """Execute the plan in this process; returns the summary. Raises BertfeatError on bad input; a failure keeps or
    removes the partial directory as failures.py says."""
    t0 = time.perf_counter()
    job = LocalRun(plan, progress or NullProgress())
    job.open()
    for phase, step in (("encode", job.encode), ("write", job.write)):
        try:
            step()
        except BaseException as e:  # what the failure keeps and says: failures.py
            raise job.failed(e, phase)
    job.summary.elapsed = time.perf_counter() - t0
    return job.summary


class LocalRun:
    """One run of a plan in this process, in the steps ``run`` calls: ``open`` the part store, ``encode`` every chunk
    into it (counts, rejects and PCA statistics taken as each chunk finishes), ``write`` the outputs from the parts;
    ``failed`` asks failures.py what a failure keeps."""

    def __init__(self, plan, progress: NullProgress):
        self.plan, self.progress = plan, progress
        self.encoder = encoder = load_encoder(plan)
        self.spec, self.fingerprint = feature_settings(encoder, plan)
        # pca_model: checked before any row is encoded
        self.applied = applied_pca(plan, self.fingerprint, encoder.output_dim(self.spec))
        self.store = PartStore(plan.layout.partial)
        self.done: set[int] = set()  # chunks the interrupted run finished (resume)
        self.order: list[int] = []  # chunks accounted so far (resumed ones as they are read)
        self.rejects: dict[int, list[dict]] = {}
        self.pca = new_pca(plan.pca_n_components) if plan.pca is not None else None
        self.limit = plan.max_bad_rows
        self.repeats = RepeatedIds() if plan.reader.id_column else None  # row numbers (no id column) never repeat
        self.respelled = RespelledNumbers()  # JSONL kept numbers written in other digits (a warning)
        self.summary: ExtractSummary | None = None
        self.complete = False  # the outputs are in place (the partial directory is gone)

    def open(self) -> None:
        """Start or continue the part store; tidy what a killed run left (temporaries, its duplicates store)."""
        plan, store = self.plan, self.store
        manifest = job_manifest(plan, self.fingerprint, self.encoder, format=plan.layout.fmt)
        self.done = store.open(manifest, plan.options.resume)
        if plan.options.overwrite:  # a resume of this run may replace the outputs without being told again
            allow_replacing(store.dir, plan.layout.outputs())
        for _, path in plan.layout.outputs() + [("partial directory", plan.layout.partial)]:  # what a killed run left
            remove_stale_temps(path)  # (temporaries of its outputs, a partial directory set aside to be deleted)
        self.summary = new_summary(plan, self.encoder, self.spec, "local", chunks_resumed=len(self.done))
        if self.done:
            self.progress.note(f"resuming: {len(self.done)} chunk(s) already done in {store.dir}")
        for stale in store.dir.glob(".dedup-*"):  # the duplicates store of the interrupted run (its vectors are in its parts)
            stale.unlink(missing_ok=True)

    def encode(self) -> None:
        """Every chunk: read and tokenized ahead (prepared_chunks), encoded, written as a part and accounted; the
        interrupted run's finished chunks read back from their parts."""
        plan, encoder, spec, store, progress, summary = self.plan, self.encoder, self.spec, self.store, self.progress, self.summary
        reuser = make_reuser(encoder, spec, plan.cache, store.dir)
        try:
            progress.start(plan.reader.total_rows, plan.reader.total_bytes)
            items = read_ahead(prepared_chunks(plan, encoder, spec, self.done, reuser), READ_AHEAD_CHUNKS,
                               name="bertfeat-reader")
            try:
                for item in items:
                    if item[0] == "done":  # finished by the interrupted run: its part is read once, here
                        _, index, bytes_read, rows = item
                        *part, respelled = store.read_part(index)
                        self.account(index, *part, rows=rows, resumed=True)
                        self.respelled.merge(respelled)  # (its tally, as the chunk's run counted it)
                        progress.advance(len(rows), 0, bytes_read)
                        continue
                    pc: PreparedChunk = item[1]
                    before = (reuser.encoded, reuser.reused, reuser.tokens_encoded)
                    table = chunk_table(encoder, spec, pc, plan.id_name, plan.keep_types, reuser, plan.reader.id_type())
                    check_output_values(plan, table, pc.chunk.rows)  # (a CSV output: no date past year 9999)
                    reuse = {"rows_encoded": reuser.encoded - before[0], "rows_reused": reuser.reused - before[1],
                             "tokens_encoded": reuser.tokens_encoded - before[2]}
                    respelled = RespelledNumbers()
                    respelled.add(pc.chunk, plan.reader)
                    with uninterrupted():  # a part on disk is a chunk counted: a stop between kept it uncounted (removed)
                        store.write_part(pc.chunk.index, table, pc.chunk.rejects, pc.chunk.n_read, reuse, respelled.tally)
                        self.account(pc.chunk.index, table, pc.chunk.rejects, pc.chunk.n_read, reuse, pc.chunk.rows)
                    self.respelled.merge(respelled.tally)
                    # the tokens of the rows written, reused ones too (as the Dask engine's): a cached chunk's rows/s
                    # beside "0 tokens/s" read as rows without tokens
                    tokens = int(table.column("n_tokens").to_numpy().sum())
                    progress.advance(pc.chunk.n_read, tokens, pc.chunk.bytes_read)
            finally:
                items.close()
                progress.stop()
        finally:
            summary.cache_repaired, summary.cache_read_only = reuser.corrupt, reuser.read_only
            reuser.close()
        for note in summary.cache_notes():
            progress.note(note)
        summary.rows_multiline = getattr(plan.reader, "multiline_rows", 0)
        check_input_unchanged(plan)  # every row read: a file that grew meanwhile fails the run, nothing published

    def account(self, index: int, table: pa.Table, chunk_rejects: list[dict], n_read: int, reuse: dict, rows: list[int],
                resumed=False):
        """A finished unit's counts, rejects, ids and PCA statistics, taken while its table is in memory (``rows``: its
        input rows, the written ones when not ``resumed``; ``resumed``: a chunk kept from the interrupted run, whose
        written rows are its rows less its rejects)."""
        plan, summary = self.plan, self.summary
        self.order.append(index)
        self.rejects[index] = chunk_rejects
        if self.repeats is not None:
            if resumed:
                bad = {r["row"] for r in chunk_rejects}
                rows = [r for r in rows if r not in bad]
            self.repeats.add(table.column(plan.id_name), rows)
        counts = table_counts(table, self.spec.max_length)
        summary.add({"rows_read": n_read, **counts, **reuse})
        if resumed:
            summary.add_resumed({**counts, **reuse})
        summary.rows_rejected += len(chunk_rejects)
        if self.limit is not None and self.limit.exceeded(summary.rows_rejected, summary.rows_read, final=False):
            raise self.too_many_bad_rows()
        if self.pca is not None and table.num_rows:
            accumulate_pca(self.pca, feature_matrix(table))
        if plan.dtype == "float16" and not plan.reduces and table.num_rows:  # refused now, not after the last chunk
            first = summary.rows_written - table.num_rows
            check_float16_range(feature_matrix(table), table.column(plan.id_name), first)

    def all_rejects(self) -> list[dict]:
        return [r for i in sorted(self.rejects) for r in self.rejects[i]]

    def too_many_bad_rows(self) -> TooManyBadRows:
        """max_bad_rows passed: the finished chunks stay for a resume with a higher limit (not from standard input)."""
        kept = kept_for_limit(self.failure("resumable", "encode"))
        return self.limit.error(self.plan.reader.name, self.all_rejects(), self.summary.rows_read, kept)

    def write(self) -> None:
        """The outputs from the parts (finalize), then the label's linear probe added to the report."""
        plan, summary = self.plan, self.summary
        if self.limit is not None and self.limit.exceeded(summary.rows_rejected, summary.rows_read, final=True):
            raise self.too_many_bad_rows()
        pca = self.pca if self.pca is not None else self.applied
        summary.outputs = finalize(plan, self.store, sorted(self.order), self.encoder, self.spec, self.fingerprint,
                                   summary, pca, self.all_rejects())
        self.complete = True  # the probe (reading the output again) only adds to the report
        summary.probe = probe_into_report(plan, pca, self.fingerprint, summary.outputs["features"], self.progress)
        self.warn_repeated_ids()  # last: a caller's filter may make a warning an error (the Dask engine's order)

    def warn_repeated_ids(self) -> None:
        """Ids written on more than one row, and JSONL kept numbers written in other digits: counted in the summary,
        and a warning each (the CLI's ``Warning:`` line)."""
        if self.repeats is not None:
            self.repeats.report(self.summary, self.plan.reader.name, self.plan.reader.id_column)
        self.respelled.report(self.summary, self.plan.reader)

    def failure(self, kind: str, phase: str, e: BaseException | None = None) -> Failure:
        """What happened, for failures.py: standard input or not, the chunks in the part store, the outputs' state."""
        plan = self.plan
        return Failure(kind, phase, self.store.dir, plan.layout.features, "chunk", len(self.done.union(self.order)),
                       stdin=plan.input == "-", complete=self.complete or getattr(e, "outputs_complete", False),
                       probe_missing=plan.label is not None and self.summary is not None and self.summary.probe is None)

    def failed(self, e: BaseException, phase: str) -> BaseException:
        """The exception to raise for a failure in ``phase``, the part store kept or removed (failures.handle)."""
        e = interrupt_in(e) or e  # what a kernel made of a Ctrl-C: the Ctrl-C (its outputs_complete, its note)
        return handle(e, self.failure(kind_of(e, (DamagedPart,)), phase, e), self.store.remove)


def finalize(plan, store: PartStore, order: list[int], encoder, spec, fingerprint: dict, summary: ExtractSummary, pca,
             rejects: list[dict]) -> dict:
    """Fit the accumulated PCA (or take the applied one: pca_model), then stream the parts (each read once) into the
    output file(s); remove the partial directory. The counts and the PCA statistics were taken as each part was made."""
    meta = provenance(encoder, spec, fingerprint, plan, summary)
    outputs: dict[str, Path] = {}
    group = None
    try:
        with together() as group:  # the PCA model and report, the features and the rejects appear together, or none
            mark_finishing(store.dir, plan.layout.outputs())
            _write_outputs(plan, store, order, encoder, spec, fingerprint, summary, pca, rejects, meta, outputs)
        store.remove()
    except KeyboardInterrupt as e:
        if group is not None and group.done:  # held back until the files were in place: they are complete (and an
            store.remove()  # interrupted removal left a hidden directory the next run deletes, not OUTPUT.partial)
            e.outputs_complete = True
        raise
    return outputs


def _write_outputs(plan, store: PartStore, order: list[int], encoder, spec, fingerprint: dict, summary: ExtractSummary,
                   pca, rejects: list[dict], meta: dict, outputs: dict) -> None:
    """finalize's files (inside atomic.together): the PCA's, the features from the parts, the rejects."""
    from ..features import FeatureWriter

    layout, id_name = plan.layout, plan.id_name
    if plan.pca is not None:
        pca_outputs, meta["pca"] = finish_pca(pca, summary.rows_written, layout, fingerprint)
        outputs.update(pca_outputs)
    elif pca is not None:
        meta["pca"] = applied_pca_entry(pca, plan)

    dim = pca.n_components_ if pca is not None else encoder.output_dim(spec)
    id_type = plan.reader.id_type()  # the reader's rule, as on the Dask engine
    if id_type is None:
        id_type = pa.string()
        for i in order:  # the first part with an accepted row (a chunk whose rows were all rejected has no id type)
            t = pq.read_schema(store.part_path(i)).field(id_name).type
            if not pa.types.is_null(t):
                id_type = t
                break
    writer = FeatureWriter(layout.features, fmt=layout.fmt, dim=int(dim), id_name=id_name, id_type=id_type, metadata=meta,
                           wide=plan.options.wide, extra_columns=output_columns(plan.keep_types), dtype=plan.dtype)
    with writer:
        for i in order:
            t = store.read_part(i)[0]
            X = feature_matrix(t)
            if pca is not None and len(X):
                X = pca.transform_rows(X).astype(np.float32)
            writer.write(t.column(id_name), X, extra_columns(t, plan.keep))  # (Arrow's: to_pylist cuts a time64[ns])
        outputs["features"] = writer.close()
    for name, path in layout.side_files()[1:]:  # a .npy's ids file, a .npy / .csv's provenance: written too
        outputs[name.removesuffix(" file")] = path
    outputs.update(publish_rejects(layout.rejects, rejects, plan.keep))
    remove_stale(layout.stale_pca(plan.pca_model))
