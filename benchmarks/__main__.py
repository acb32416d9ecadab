"""Run every benchmark (``benchmarks/bench_*.py``) one after another: ``python -m benchmarks``.

Each runs in its own process so one's memory does not weigh on the next;
``python -m benchmarks snapshot merge`` runs only those.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    names = sorted(p.stem[len("bench_"):] for p in here.glob("bench_*.py"))
    chosen = [n for n in names if not argv or n in argv]
    failed = []
    for name in chosen:
        print(f"\n# benchmark: {name}", flush=True)
        if subprocess.run([sys.executable, "-m", f"benchmarks.bench_{name}"]).returncode != 0:
            failed.append(name)
    if failed:
        print(f"\nbenchmarks that failed to run: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
