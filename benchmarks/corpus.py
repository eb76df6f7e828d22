"""The benchmark corpus: about 4,000 real sentences from ../shared/data (SST-2, TREC, STSb), fixed order."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("BERTFEAT_DATA", ROOT.parent / "shared" / "data"))  # the full data sets (tests/data/README.md)


def build_corpus(n: int = 4000) -> list[str]:
    """Interleave SST-2 train, TREC train and STSb sentences so lengths are mixed in file order (at most the 15,372
    they hold)."""
    sst = [l.split(" ", 1)[1] for l in (SHARED / "sst2" / "stsa.binary.train").read_text(encoding="utf-8").splitlines() if l.strip()]
    trec = [l.split(" ", 1)[1] for l in (SHARED / "trec" / "TREC.train").read_text(encoding="latin-1").splitlines() if l.strip()]
    sts = []
    for line in (SHARED / "stsb" / "sts-dev.csv").read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) >= 7:
            sts += [parts[5], parts[6]]
    out, i = [], 0
    while len(out) < n and i < max(len(sst), len(trec), len(sts)):  # every source used up: fewer than n
        for src in (sst, trec, sts):
            if i < len(src) and len(out) < n:
                out.append(src[i])
        i += 1
    return out


def held_out_sentences() -> list[str]:
    """Real sentences build_corpus never uses (SST-2 dev and test, TREC test: about 3,200), e.g. to train a
    tokenizer for a random-weight benchmark model without seeing the timed corpus."""
    out = []
    for name in ("stsa.binary.dev", "stsa.binary.test"):
        out += [l.split(" ", 1)[1] for l in (SHARED / "sst2" / name).read_text(encoding="utf-8").splitlines() if l.strip()]
    out += [l.split(" ", 1)[1] for l in (SHARED / "trec" / "TREC.test").read_text(encoding="latin-1").splitlines() if l.strip()]
    return out
