"""python -m benchmarks.token_estimate [--out FILE]

How well ``agent_memory.token_estimate`` counts tokens without a tokenizer, per language: its
estimate of a text against what two real tokenizers count (OpenAI's ``cl100k_base`` and
``o200k_base``, through ``tiktoken`` from the copies litellm ships), on two sources of text that
have nothing to do with conversations or with each other, each in about sixty languages:

* ``mkdocs-material``: the user interface strings of the documentation theme, one file a
  language (``material/templates/partials/languages/*.html``);
* ``cldr``: the names of the world's territories in each language, from Unicode's CLDR as
  ``babel`` ships it.

For each (source, language, tokenizer): the ratio estimate / tokens. Below 1 the estimate
counts too few (a budget spent past its end); above 1 too many (a budget left unused). Also the
same ratio for the rule it replaced, four characters a token. Both sources come with the
``docs`` dependency group (mkdocs-material, and babel beside it).
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from agent_memory import token_estimate
from benchmarks._common import emit, parser

TOKENIZERS = ("cl100k_base", "o200k_base")
_STRING = re.compile(r'^\s*"([^"]+)": "(.*)",?\s*$')


def material_texts() -> dict[str, str]:
    """The theme's strings, a text per language."""
    spec = find_spec("material")
    if spec is None or spec.origin is None:
        return {}
    folder = Path(spec.origin).parent / "templates" / "partials" / "languages"
    out = {}
    for page in sorted(folder.glob("*.html")):
        said = []
        for line in page.read_text(encoding="utf-8").splitlines():
            found = _STRING.match(line)
            if found and not found.group(1).startswith(("search.config", "language", "direction")):
                said.append(found.group(2))
        if said:
            out[page.stem] = "\n".join(said)
    return out


def cldr_texts() -> dict[str, str]:
    """The territories' names, a text per language (the languages the theme has, as CLDR
    names them)."""
    try:
        from babel import Locale, UnknownLocaleError
    except ImportError:
        return {}
    out = {}
    for code in material_texts():
        try:
            locale = Locale.parse(code.replace("-", "_"))
        except (UnknownLocaleError, ValueError):
            continue
        names = [n for k, n in sorted(locale.territories.items()) if k.isalpha()]
        out[code] = ", ".join(names)
    return out


def encoders() -> dict[str, Any]:
    import os

    import litellm  # its package holds the tokenizers' files: nothing is downloaded

    folder = Path(litellm.__file__).parent / "litellm_core_utils" / "tokenizers"
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(folder))
    import tiktoken

    return {name: tiktoken.get_encoding(name) for name in TOKENIZERS}


def measure() -> dict[str, Any]:
    coders = encoders()
    result: dict[str, Any] = {}
    for source, texts in (("mkdocs-material", material_texts()), ("cldr", cldr_texts())):
        rows = {}
        for language, text in texts.items():
            if len(text) < 200:  # too little to say (a territory list CLDR lacks)
                continue
            row: dict[str, Any] = {"chars": len(text)}
            for name, coder in coders.items():
                real = len(coder.encode(text))
                row[name] = {
                    "tokens": real,
                    "estimate": round(token_estimate.tokens(text) / real, 3),
                    "four_chars": round(len(text) / 4 / real, 3),
                }
            rows[language] = row
        summary = {}
        for name in TOKENIZERS:
            for rule in ("estimate", "four_chars"):
                ratio = {language: float(r[name][rule]) for language, r in rows.items()}
                summary[f"{name} {rule}"] = {
                    "median": round(statistics.median(ratio.values()), 3),
                    "lowest": min(ratio.values()),
                    "lowest_language": min(ratio, key=ratio.__getitem__),
                    "below_0.75": sorted(k for k, v in ratio.items() if v < 0.75),
                }
        result[source] = {"languages": len(rows), "summary": summary, "by_language": rows}
    return result


def main(argv: list[str] | None = None) -> int:
    cli = parser("token_estimate", __doc__)
    cli.add_argument("--out", type=Path, default=None)
    args = cli.parse_args(argv)
    result = measure()
    for source, figures in result.items():
        print(source, json.dumps(figures["summary"], indent=1), file=sys.stderr)
    return emit(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
