"""python -m benchmarks [--quick] [--only NAMES] [--out FILE]

Every benchmark in one command, one JSON document: each section runs as its own process
(``python -m benchmarks.<name>``, its own databases and servers) and its JSON goes under its
name. Each figure inside is reported with the reference it is divided by, measured in the same
run (see each module's docstring):

* inject        - inject (importance; relevance by full text and by embeddings), record single
                  and batched, the seed's query; recall@5 on the labelled set
* levels        - inject reading three levels of memory against one, at 10,000 facts a scope
* snippets      - searching past conversations (full text, hybrid) at 100,000 messages a scope
* recall        - recall@k, MRR, tokens and inject time per ranking on the built-in set
* decay         - a daily decay run against the seed's UPDATE + DELETE on the same data
* analytics     - loading facts into polars through Arrow against fetchall; the decay report
* consolidation - the flow against the ideal with a loopback LLM; rerun; token use of a backlog
* memory        - peak RSS while consolidating a backlog
* load          - agents injecting and recording while the flows run; where a turn's CPU
                  goes (client and server, per statement)
* record        - what one record costs PostgreSQL (time, CPU, WAL) against a bare INSERT
* store         - the LangGraph Store operations against LangGraph's PostgresStore
* quantized     - an HNSW index of halfvec, or of binary quantization re-ranked, against one
                  of vector: time per question and recall@10 against the exact nearest
* multilingual_inject - inject with the multilingual extra's model at 10,000 facts against the
                  bundled model's (skipped, saying so, without the extra)

--quick runs every section at its small size (a CI smoke run); the default is the full size
the README's bounds apply to. The exit status is 1 when a section fails or misses a bound; at
the small size the bounds are the recall floors of the built-in set
(``benchmarks/recall_floors.json``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._common import ROOT

SECTIONS = (
    "inject",
    "levels",
    "snippets",
    "recall",
    "decay",
    "analytics",
    "consolidation",
    "memory",
    "load",
    "record",
    "store",
    "quantized",
    "multilingual_inject",
)


def run_section(name: str, quick: bool) -> dict[str, Any]:
    """One section in a process of its own; its JSON, or what went wrong."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", *(["--quick"] if quick else [])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    seconds = round(time.perf_counter() - started, 1)
    try:
        result: dict[str, Any] = json.loads(done.stdout[done.stdout.index("{") :])
    except ValueError:
        return {
            "error": f"exit {done.returncode}: {done.stderr.strip()[-2000:]}",
            "seconds": seconds,
        }
    result["seconds"] = seconds
    return result


def failed(result: dict[str, Any]) -> bool:
    return "error" in result or result.get("pass") is False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="every section at its small size")
    parser.add_argument(
        "--only", default=",".join(SECTIONS), help=f"comma-separated, of {', '.join(SECTIONS)}"
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    report: dict[str, Any] = {"size": "quick" if args.quick else "full"}
    for name in names:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        report[name] = run_section(name, args.quick)
    report["failed"] = [n for n in names if failed(report[n])]
    text = json.dumps(report, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 1 if report["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
