"""JSONL: one JSON object per line; the columns from the first lines, a bad line a bad row in its place."""

from __future__ import annotations

import json

import pyarrow as pa

from ..errors import InputError
from ..rejects import Reason, RejectCode
from .base import HEAD_BYTES, RawBatch, short_error
from .text import TextReader


class JsonlReader(TextReader):
    """One JSON object per line."""

    def _setup(self, delimiter):
        super()._setup(delimiter)
        self._json_types: dict[str, set] = {}  # column -> the kinds of its values in the first lines
        self._first_kind: dict[str, str] = {}  # column -> the kind of its first value that is not null

    def _count_lines(self, data: bytes) -> int:
        """Lines that are not blank (JSON strings hold no raw line break): the rows, as _parse reads them."""
        return sum(1 for ln in data.removeprefix(b"\xef\xbb\xbf").split(b"\n") if ln.strip())

    def _string_columns(self) -> list[str]:
        return [c for c, types in self._json_types.items() if "str" in types]

    def id_type(self) -> pa.DataType | None:
        """The first id decides, as the reader's rule (an id of the other kind is a bad row): integer ids are
        int64, string ids string; None when the first lines hold no usable id."""
        if self.id_column is None:
            return pa.int64()
        return {"int": pa.int64(), "str": pa.string()}.get(self._first_kind.get(self.id_column))

    def _head_columns(self, head: bytes) -> list[str]:
        lines = head.removeprefix(b"\xef\xbb\xbf").split(b"\n")
        if len(head) == HEAD_BYTES and len(lines) > 1:
            lines = lines[:-1]  # the last line may be cut
        for line in lines[:1000]:
            try:
                obj = json.loads(line.decode(self.encoding))
            except (ValueError, UnicodeDecodeError):
                continue
            if isinstance(obj, dict):
                for k, v in obj.items():
                    self._json_types.setdefault(k, set()).add(type(v).__name__)
                    if v is not None:
                        self._first_kind.setdefault(k, type(v).__name__)
        return list(self._json_types)


    def _parse(self, fh, counter):
        rows, texts, pairs, ids, pre = [], [], [], [], {}
        row = 0
        id_kind = None  # the type of the first id: every id must be of the same kind (int or str)
        consumed = 0
        start = 0  # bytes consumed before the batch
        try:
            while True:
                try:
                    line = fh.readline()
                except (OSError, EOFError, ValueError, pa.ArrowException) as e:
                    raise InputError(f"{self.name} near row {row}: cannot read the file ({short_error(e)})",
                                     "check the file is complete and its compression") from None
                if not line:
                    break
                if consumed == 0:
                    line = line.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte order mark
                consumed += 1
                if not line.strip():
                    continue  # blank lines are not rows
                rows.append(row)
                text = pair = ident = None
                try:
                    obj = json.loads(line.decode(self.encoding).strip())
                    if not isinstance(obj, dict):
                        raise ValueError(f"a line must hold a JSON object, not {_json_kind(obj)}")
                    text = obj.get(self.text_column)
                    pair = obj.get(self.pair_column) if self.pair_column else None
                    ident = obj.get(self.id_column) if self.id_column else None
                    if self.text_column not in obj:
                        pre[row] = Reason(RejectCode.MISSING_FIELD, f"no field '{self.text_column}'")
                    elif self.pair_column and self.pair_column not in obj:
                        pre[row] = Reason(RejectCode.MISSING_FIELD, f"no field '{self.pair_column}'")
                    elif ident is not None:
                        kind = "integer" if isinstance(ident, int) and not isinstance(ident, bool) else \
                            "string" if isinstance(ident, str) else None
                        if kind is None:
                            pre[row] = Reason(RejectCode.BAD_ID, f"id {json.dumps(ident)[:40]} is {_json_kind(ident)}, "
                                                                 "not a string or an integer")
                        elif id_kind is None:
                            id_kind = kind
                        elif kind != id_kind:
                            pre[row] = Reason(RejectCode.BAD_ID, f"id {json.dumps(ident)[:40]} is {'an' if kind == 'integer' else 'a'} "
                                                                 f"{kind}, but the ids before it are {id_kind}s")
                except UnicodeDecodeError as e:
                    pre[row] = Reason(RejectCode.ENCODING, f"invalid {self.encoding} at byte {e.start} of the line")
                    if self.id_column:  # the id, for the rejects file, if the rest of the line is readable
                        try:
                            ident = json.loads(line.decode(self.encoding, errors="replace")).get(self.id_column)
                        except (ValueError, AttributeError):
                            ident = None
                except ValueError as e:
                    pre[row] = Reason(RejectCode.INVALID_JSON, f"invalid JSON ({e})")
                if row in pre:
                    ident = ident if isinstance(ident, (int, str)) else None
                texts.append(text); pairs.append(pair); ids.append(ident)
                row += 1
                if len(rows) >= self.batch_rows:
                    yield RawBatch(rows, texts, pairs if self.pair_column else None, ids if self.id_column else None, pre,
                                   counter.count, start)
                    rows, texts, pairs, ids, pre = [], [], [], [], {}
                    start = counter.count
            if rows:
                yield RawBatch(rows, texts, pairs if self.pair_column else None, ids if self.id_column else None, pre,
                               counter.count, start)
        finally:
            fh.close()


def _json_kind(v) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number",
            type(None): "null"}.get(type(v), type(v).__name__)
