"""Write the acceptance corpus's mapping documents (tests/corpus.py) to tests/data/corpus/, one gzip per slice.

Run only to record a change the docs list with its cause: tests/test_corpus.py compares against these files.
    python scripts/corpus_snapshot.py            # every case
    python scripts/corpus_snapshot.py resnet50   # the cases whose name contains a word
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.corpus import CASES, SNAPSHOTS, document


def main(words: list[str]) -> None:
    SNAPSHOTS.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        if words and not any(w in case.name for w in words):
            continue
        text = json.dumps(document(case), sort_keys=True, separators=(",", ":"))
        (SNAPSHOTS / f"{case.name}.json.gz").write_bytes(gzip.compress(text.encode(), mtime=0))
        print(case.name, len(text))


if __name__ == "__main__":
    main(sys.argv[1:])
