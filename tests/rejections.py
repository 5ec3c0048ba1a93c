"""Count the differential generator's refusals.

`python tests/rejections.py [FIRST LAST [PATTERN]] [--all]` lowers cases FIRST..LAST-1 of tests/random_sharded.py (the N-D ones,
or every one with --all) and prints how many lowered, how many were refused, and the
seed and message of each refusal whose message PATTERN (a regex) matches.

    python tests/rejections.py 0 6000 'placed differently|sharded differently'
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from random_nd import is_nd_case  # noqa: E402
from test_differential import lower_case  # noqa: E402


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=int, nargs="?", default=0)
    parser.add_argument("last", type=int, nargs="?", default=6000)
    parser.add_argument("pattern", nargs="?", default=".")
    parser.add_argument("--all", action="store_true", help="every case, not only N-D ones")
    a = parser.parse_args(argv)
    first, last, pattern, every = a.first, a.last, a.pattern, a.all
    wanted = re.compile(pattern)
    counts: Counter = Counter()
    matching = []
    for seed in range(first, last):
        if not (every or is_nd_case(seed)):
            continue
        _, ex = lower_case(seed)
        outcome = ex[0] if isinstance(ex, tuple) else "lowered"
        counts[outcome] += 1
        if isinstance(ex, tuple) and wanted.search(ex[1]):
            matching.append(f"{seed}: {ex[1].splitlines()[0][:300]}")
    kind = "cases" if every else "N-D cases"
    print(f"seeds {first}..{last - 1}: {sum(counts.values())} {kind}, {dict(counts)}")
    print(f"refusals matching {pattern!r}: {len(matching)}")
    print("\n".join(matching))


if __name__ == "__main__":
    main(sys.argv[1:])
