"""python -m benchmarks.offline [--sample FILE] [--languages DATASET ...]

How good the offline extractor's facts are, on a labelled sample of user turns
(tests/data/offline_sample.jsonl: each line a user's message and the facts a careful reader
accepts as well-formed, true statements about the user from it, often none). It prints JSON:
facts per 100 user turns, the share of the extracted facts that are well-formed (among the
accepted ones), the share of the accepted facts the rules found, and every fact that is not
well-formed, so a change to the rules is judged on all three.

With --languages, for each recall dataset (JSON Lines as benchmarks.recall reads them; ``-`` for
the built-in set) it prints instead what the rules read of its users' sentences: how many full
text parses as each language, and the facts the rules find in those it does not parse as
English, which the offline extractor leaves unread (docs/memory.md, "Memory in other
languages").
"""

from __future__ import annotations

import json
import re
import sys
from datetime import date
from pathlib import Path
from typing import Any

from agent_memory.extraction.rules import facts_from_text
from agent_memory.extraction.summary import SENTENCE
from agent_memory.languages import ENGLISH, language_of
from benchmarks._common import emit, parser
from benchmarks._recall_dataset import read_dataset

DAY = date(2026, 5, 4)
_SAID_ON = re.compile(r" \(said on \d{4}-\d{2}-\d{2}\)\.$")
SAMPLE = Path(__file__).resolve().parent.parent / "tests" / "data" / "offline_sample.jsonl"


def measure(sample: Path = SAMPLE) -> dict[str, Any]:
    """The figures for the labelled turns in ``sample``."""
    turns = [json.loads(line) for line in sample.read_text(encoding="utf-8").splitlines() if line]
    extracted = accepted = found = 0
    wrong: list[dict[str, str]] = []
    for turn in turns:
        # said on a day, as in consolidation; the labels judge the statement, so the day a fact
        # dated relative to it carries ("(said on ...)") is not compared
        facts = [_SAID_ON.sub(".", f.content) for f in facts_from_text(turn["text"], DAY)]
        labels = set(turn["facts"])
        extracted += len(facts)
        accepted += len(labels)
        good = [f for f in facts if f in labels]
        found += len(set(good))
        wrong += [{"text": turn["text"], "fact": f} for f in facts if f not in labels]
    return {
        "user_turns": len(turns),
        "facts_extracted": extracted,
        "facts_per_100_user_turns": round(100 * extracted / max(len(turns), 1), 1),
        "well_formed_share": round((extracted - len(wrong)) / extracted, 3) if extracted else None,
        "accepted_facts_found_share": round(found / accepted, 3) if accepted else None,
        "not_well_formed": wrong,
    }


def languages(dataset: Path | None) -> dict[str, Any]:
    """The languages of a dataset's user sentences (``dataset`` None: the built-in set), and
    the facts the rules find in the sentences not parsed as English."""
    by_language: dict[str, int] = {}
    unread: list[dict[str, Any]] = []
    for conversation in read_dataset(dataset):
        for session in conversation["sessions"]:
            for turn in session["turns"]:
                if turn["speaker"] != conversation["user"]:
                    continue
                for sentence in filter(str.strip, SENTENCE.split(turn["text"])):
                    language = language_of(sentence)
                    by_language[language] = by_language.get(language, 0) + 1
                    facts = [] if language == ENGLISH else facts_from_text(sentence, DAY)
                    if facts:
                        unread.append({"sentence": sentence, "facts": [f.content for f in facts]})
    return {
        "dataset": str(dataset) if dataset else "built-in",
        "user_sentences": sum(by_language.values()),
        "by_language": dict(sorted(by_language.items(), key=lambda kv: -kv[1])),
        "facts_in_sentences_not_english": sum(len(u["facts"]) for u in unread),
        "unread": unread,
    }


def main(argv: list[str] | None = None) -> int:
    cli = parser("offline", __doc__)
    cli.add_argument("--sample", type=Path, default=SAMPLE)
    cli.add_argument("--languages", nargs="+", metavar="DATASET")
    args = cli.parse_args(argv)
    if args.languages:
        emit({"datasets": [languages(None if d == "-" else Path(d)) for d in args.languages]})
    else:
        emit(measure(args.sample))
    return 0


if __name__ == "__main__":
    sys.exit(main())
