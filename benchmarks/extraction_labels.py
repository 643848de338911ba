"""python -m benchmarks.extraction_labels --dataset locomo.jsonl [--labels FILE]

How the offline extractor does on conversations its rules were not written against: 150 user
turns of LoCoMo, labelled by hand (benchmarks/data/locomo_fact_labels.json: the turns were
drawn and fixed before any rule was changed against them; their text comes from your own copy
of LoCoMo, converted by ``python -m benchmarks.locomo``). Each turn is extracted as
consolidation extracts a user's message, said on its session's day.

A fact *matches* a label when it says at least half (rounded up) of the label's content words
(stems, stop words left out: ``benchmarks.recall_set.content_words``), each fact matching one
label at most. Reported: facts per 100 user turns, precision (the share of the facts that match
a label), recall (the share of the labels matched), and every fact and label left unmatched,
to read. Lenient by design: it credits a fact that says what a label says in other words only
when they share half its words, and it does not judge whether a fact is well-formed
(``python -m benchmarks.offline`` does that on its own sample).
"""

from __future__ import annotations

import json
import math
import sys
from datetime import date
from pathlib import Path
from typing import Any

from agent_memory.extraction.rules import facts_from_text
from benchmarks._common import emit, parser
from benchmarks._recall_dataset import read_dataset
from benchmarks.recall_set import content_words

LABELS = Path(__file__).resolve().parent / "data" / "locomo_fact_labels.json"


def matches(fact: str, label: str) -> bool:
    """The fact says at least half (rounded up) of the label's content words."""
    wanted = content_words(label)
    return bool(wanted) and len(wanted & content_words(fact)) >= math.ceil(len(wanted) / 2)


def score(turns: list[tuple[str, date, list[str]]]) -> dict[str, Any]:
    """The figures for labelled turns: (text, the day it was said, its labels) each."""
    facts_n = labels_n = matched_facts = matched_labels = 0
    unmatched: list[dict[str, Any]] = []
    for text, day, labels in turns:
        facts = [f.content for f in facts_from_text(text, day)]
        facts_n += len(facts)
        labels_n += len(labels)
        left = list(labels)
        extra = []
        for fact in facts:
            hit = next((label for label in left if matches(fact, label)), None)
            if hit is None:
                extra.append(fact)
            else:
                left.remove(hit)
                matched_facts += 1
        matched_labels += len(labels) - len(left)
        if extra or left:
            unmatched.append({"text": text[:200], "facts_unmatched": extra, "labels_missed": left})
    return {
        "user_turns": len(turns),
        "labels": labels_n,
        "facts": facts_n,
        "facts_per_100_user_turns": round(100 * facts_n / max(len(turns), 1), 1),
        "precision": round(matched_facts / facts_n, 3) if facts_n else None,
        "recall": round(matched_labels / labels_n, 3) if labels_n else None,
        "unmatched": unmatched,
    }


def labelled_turns(dataset: Path, labels: Path = LABELS) -> list[tuple[str, date, list[str]]]:
    """The labelled turns' text and day from the dataset; a label naming a turn the dataset
    does not have stops the run (another version of LoCoMo, or another file)."""
    said: dict[tuple[str, str], tuple[str, date]] = {
        (c["id"], t["id"]): (t["text"], date.fromisoformat(s["date"][:10]))
        for c in read_dataset(dataset)
        for s in c["sessions"]
        for t in s["turns"]
    }
    found = []
    for item in json.loads(labels.read_text(encoding="utf-8"))["turns"]:
        key = (item["conversation"], item["turn"])
        if key not in said:
            raise SystemExit(f"{dataset}: no turn {key[1]!r} in conversation {key[0]!r}")
        text, day = said[key]
        found.append((text, day, list(item["facts"])))
    return found


def main(argv: list[str] | None = None) -> int:
    cli = parser("extraction_labels", __doc__, quick="the same (it takes a second)")
    cli.add_argument("--dataset", type=Path, required=True, help="LoCoMo as JSON Lines")
    cli.add_argument("--labels", type=Path, default=LABELS)
    cli.add_argument("--out", type=Path, help="also write the JSON here")
    args = cli.parse_args(argv)
    return emit(score(labelled_turns(args.dataset, args.labels)), args.out)


if __name__ == "__main__":
    sys.exit(main())
