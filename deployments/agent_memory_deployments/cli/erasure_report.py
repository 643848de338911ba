"""What ``agent-memory erase`` (and ``levels left-behind``) prints: each scope's counts, each
level's facts learned from the erased conversations (their words only in a dry run), and what
became of the files."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_memory.db.vacuum import RELEASED
from agent_memory_deployments.cli._app import console

if TYPE_CHECKING:
    from agent_memory.db.derived import Derived
    from agent_memory.db.vacuum import Vacuumed
    from agent_memory.erasure import ErasureSummary


def _counts(removed: dict[str, int]) -> str:
    return ", ".join(f"{n} {name}" for name, n in removed.items() if n)


def print_erasure(summary: ErasureSummary) -> None:
    verb = "would erase" if summary.dry_run else "erased"
    for erased in summary.scopes:
        console.print(f"{verb} {erased.scope.label}: {_counts(erased.removed)}", highlight=False)
    print_derived(summary.derived, summary.dry_run)
    if summary.dry_run:
        console.print("dry run: nothing was written", highlight=False)
        return
    print_files(summary.files)
    if any(summary.orchestrator.values()):
        console.print(f"Prefect: {_counts(summary.orchestrator)}", highlight=False)


def print_files(files: Vacuumed) -> None:
    """What became of the tables' files and the WAL."""
    if files.rewritten:
        console.print(f"rewritten (VACUUM FULL): {', '.join(files.rewritten)}", highlight=False)
    if files.vacuumed:
        console.print(
            f"vacuumed: {', '.join(files.vacuumed)} (erased bytes may stay in their free space"
            " until overwritten; VACUUM (FULL) them to remove them now)",
            highlight=False,
        )
    for table, why in files.skipped.items():
        console.print(f"[yellow]not vacuumed: {table}: {why}[/]", highlight=False)
    if files.wal and files.wal != RELEASED:
        console.print(f"[yellow]WAL {files.wal} (docs/guarantees.md)[/]", highlight=False)


# what each list of agent_memory.db.derived.Derived is called, as the erasure did or would
_FATES = {
    "gone": ("facts learned only there, erased", "facts learned only there, would be erased"),
    "history": ("older versions of them, erased", "older versions of them, would be erased"),
    "kept": ("facts other conversations support, kept", "facts other conversations support, kept"),
    "revived": ("facts they had replaced, true again", "facts they had replaced, true again"),
}


def print_derived(derived: Derived, dry_run: bool) -> None:
    """Each level's facts learned from the erased conversations: what went and what stayed;
    their words only in a dry run (what the operator checks before erasing)."""
    for level, fates in derived.by_level().items():
        for what, facts in fates.items():
            said = _FATES[what][dry_run]
            console.print(f"  {level.label}: {len(facts)} {said}", highlight=False)
            for fact in facts if dry_run else []:
                left = (
                    f" ({fact.sources_left} other source(s){', written by hand' * fact.by_hand})"
                    if what == "kept"
                    else ""
                )
                console.print(f"    {fact.id}: {fact.content}{left}", highlight=False)
