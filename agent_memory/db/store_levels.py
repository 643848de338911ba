"""The Store's level namespaces (:mod:`agent_memory.store.namespaces`) in SQL: the namespaces,
cut before an unset part of the template, that hold the facts of a level of memory with no
memory namespace of its own (the person's, ``(alice, None, None)``, under
``("memories", "{user_id}", "{agent_id}")`` is ``("memories", "alice")``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def level_namespaces(
    labels: tuple[str, ...],
    fields: list[str | None],
    fixed: Mapping[str, str | None],
    params: dict[str, Any],
) -> list[str]:
    """One SELECT per place the template can be cut (before each placeholder but the first):
    the level namespaces of the current facts whose parts there are set before the cut and
    unset from it on. The template's literals are the parameters ``t0``, ``t1``, ...; the
    fixed parts are added to ``params`` as ``lv_<name>``."""
    for name, value in fixed.items():
        params[f"lv_{name}"] = value
    fixed_match = [f"m.{name} IS NOT DISTINCT FROM %(lv_{name})s::text" for name in fixed]
    places = [i for i, name in enumerate(fields) if name is not None]
    selects = []
    for cut in places[1:]:
        shown = [
            f"%(t{i})s::text" if name is None else f"m.{name}"
            for i, name in enumerate(fields[:cut])
        ]
        where = [
            *fixed_match,
            *(
                f"m.{name} IS NOT NULL AND strpos(m.{name}, '.') = 0"
                for name in fields[:cut]
                if name is not None
            ),
            *(f"m.{name} IS NULL" for name in fields[cut:] if name is not None),
        ]
        selects.append(
            f"SELECT DISTINCT ARRAY[{', '.join(shown)}]::text[] FROM agent_memory.memory_items m"
            f" WHERE m.superseded_at IS NULL AND {' AND '.join(where)}"
        )
    return selects
