"""How the store's namespaces map to scopes: a template such as ``("memories", "{user_id}")``.

A namespace of the template's length whose literal labels match it is a *memory namespace*:
the labels in the placeholders' places are the scope's parts (``user_id``, ``agent_id``,
``workflow_id``), the parts the template leaves out are the store's fixed ones, and its items
are facts. A longer namespace that starts with one (``("memories", "alice", "profile")``)
holds documents that belong to that scope. Every other namespace holds documents of no scope.

Levels of memory (``share``, docs/guide.md): a read of a memory namespace also shows the facts
of the levels its scope reads, each under its own key (`agent_memory.db.store.fact_key`)
and with its ``level``. A level with no memory namespace of its own under the template (the
person's, ``(alice, None, None)``, under ``("memories", "{user_id}", "{agent_id}")``) is read
at the template cut before its first unset part, its *level namespace* (``("memories",
"alice")``): a prefix search there reaches it, and ``list_namespaces`` names it. Puts are
unchanged: a put writes its exact scope's memory namespace (a put of a shown fact's key makes
the key that namespace's own), and one in a level namespace is a document of no scope; a
delete of a shown fact's key forgets the fact at its own level.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.store.base import ListNamespacesOp

from agent_memory.errors import ConfigurationError, InvalidStoreRequestError
from agent_memory.models import SCOPE_FIELDS, Scope, Share
from agent_memory.store.limits import InvalidStoreNamespaceError, check_size, shown

_PLACEHOLDER = re.compile(r"^\{([a-z_]+)\}$")

DEFAULT_TEMPLATE: tuple[str, ...] = ("memories", "{user_id}")


def check_labels(namespace: Sequence[Any], what: str = "namespace") -> tuple[str, ...]:
    """``namespace`` as a tuple of labels, refused (naming the bad label) when one is not a
    non-empty string without a period or NUL, as LangGraph's stores refuse them, or when it is
    longer than the store keeps (`agent_memory.store.limits`)."""
    if isinstance(namespace, str) or not isinstance(namespace, Sequence):
        raise InvalidStoreNamespaceError(
            f"{what} {namespace!r:.200} is not a tuple of labels (a {type(namespace).__name__})"
        )
    labels = tuple(namespace)
    for label in labels:
        if not isinstance(label, str):
            raise InvalidStoreNamespaceError(
                f"{what} {shown(labels)} has the label {label!r:.80}, a {type(label).__name__}:"
                " labels are strings"
            )
        if not label:
            raise InvalidStoreNamespaceError(f"{what} {shown(labels)} has an empty label")
        if "." in label or "\x00" in label:
            raise InvalidStoreNamespaceError(
                f"{what} {shown(labels)} has the label {shown(label)}: labels may not contain"
                " a period or a NUL byte"
            )
    check_size(labels, what)
    return labels


@dataclass(frozen=True)
class Binding:
    """What a namespace prefix says about the memory namespaces under it: the scope parts it
    fixes (``bound``), and whether memory namespaces can lie under it at all (``possible``)."""

    possible: bool
    bound: dict[str, str]
    # the prefix names one memory namespace exactly (a single scope's facts)
    exact: bool


class NamespaceTemplate:
    """A namespace template and the scope parts it leaves fixed (see the module)."""

    def __init__(
        self,
        template: Sequence[str] = DEFAULT_TEMPLATE,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        workflow_id: str | None = None,
        share: Share = "exact",
    ) -> None:
        labels = check_labels(template, "namespace template")
        self.share: Share = share  # which levels of memory a read shows (see the module)
        if not labels:
            raise ConfigurationError(
                "the namespace template is empty; e.g. ('memories', '{user_id}')"
            )
        self.labels = labels
        self.fields: list[str | None] = []  # per label: the scope part it holds, or None
        for label in labels:
            match = _PLACEHOLDER.match(label)
            if match is None:
                if "{" in label or "}" in label:
                    raise ConfigurationError(
                        f"namespace template label {label!r} is neither a literal nor one of"
                        f" {', '.join('{' + f + '}' for f in SCOPE_FIELDS)}"
                    )
                self.fields.append(None)
                continue
            name = match.group(1)
            if name not in SCOPE_FIELDS:
                raise ConfigurationError(
                    f"namespace template placeholder {label!r} is not one of"
                    f" {', '.join('{' + f + '}' for f in SCOPE_FIELDS)}"
                )
            if name in self.fields:
                raise ConfigurationError(f"namespace template {labels!r} names {label} twice")
            self.fields.append(name)
        if not any(self.fields):
            raise ConfigurationError(
                f"namespace template {labels!r} has no placeholder: it must say where the scope"
                " is, e.g. ('memories', '{user_id}')"
            )
        if labels[0] == "langgraph":
            raise ConfigurationError("a namespace template may not start with 'langgraph'")
        fixed = {"user_id": user_id, "agent_id": agent_id, "workflow_id": workflow_id}
        for name in self.fields:
            if name is not None and fixed[name] is not None:
                raise ConfigurationError(
                    f"{name} is both in the namespace template and fixed to {fixed[name]!r}"
                )
        self.fixed: dict[str, str | None] = {
            name: value for name, value in fixed.items() if name not in self.fields
        }

    def __repr__(self) -> str:
        return f"NamespaceTemplate({self.labels!r}, fixed={self.fixed!r})"

    def _scope(self, namespace: tuple[str, ...]) -> Scope | None:
        parts: dict[str, str | None] = dict(self.fixed)
        for label, want, name in zip(namespace, self.labels, self.fields, strict=False):
            if name is None:
                if label != want:
                    return None
            else:
                parts[name] = label
        return Scope(**parts)

    def memory_scope(self, namespace: tuple[str, ...]) -> Scope | None:
        """The scope whose memory namespace ``namespace`` is; None if it is not one."""
        return self._scope(namespace) if len(namespace) == len(self.labels) else None

    def owner(self, namespace: tuple[str, ...]) -> Scope | None:
        """The scope ``namespace`` belongs to: its memory namespace or one under it."""
        return self._scope(namespace) if len(namespace) >= len(self.labels) else None

    def level_scope(self, namespace: tuple[str, ...]) -> Scope | None:
        """The scope whose level namespace ``namespace`` is (see the module): one shorter
        than the template, its literals matching, holding a placeholder's label and cut just
        before another placeholder, the parts it leaves out unset. None when it is none, or
        when the store reads no levels (``share`` is ``exact``)."""
        n = len(namespace)
        if self.share == "exact" or not 0 < n < len(self.labels) or self.fields[n] is None:
            return None
        if not any(self.fields[:n]):
            return None
        scope = self._scope(namespace)
        if scope is None:
            return None
        later = {name: None for name in self.fields[n:] if name is not None}
        return Scope(**{**scope.as_dict(), **later})

    def reading(self, namespace: tuple[str, ...]) -> tuple[Scope, tuple[Scope, ...]] | None:
        """What a read of exactly ``namespace`` shows of facts: the scope it is the memory or
        level namespace of, and the levels whose facts it shows besides the memory namespace's
        own (those of `Scope.levels` under ``share``; all of them for a level
        namespace). None for a namespace of neither kind."""
        scope = self.memory_scope(namespace)
        if scope is not None:
            return scope, scope.levels(self.share)[1:]
        scope = self.level_scope(namespace)
        return (scope, scope.levels(self.share)) if scope is not None else None

    def render(self, scope: Scope) -> tuple[str, ...] | None:
        """The memory namespace of ``scope``; None when it has none (a part the template holds
        is unset or has a period, which a label may not have, or a fixed part differs)."""
        parts = scope.as_dict()
        if any(parts[name] != value for name, value in self.fixed.items()):
            return None
        labels = []
        for literal, name in zip(self.labels, self.fields, strict=True):
            value = literal if name is None else parts[name]
            if not value or "." in value or "\x00" in value:
                return None
            labels.append(value)
        return tuple(labels)

    def binding(self, prefix: tuple[str, ...]) -> Binding:
        """What ``prefix`` fixes of the memory namespaces under it (see `Binding`)."""
        if len(prefix) > len(self.labels):
            return Binding(False, {}, False)
        bound: dict[str, str] = {}
        for label, want, name in zip(prefix, self.labels, self.fields, strict=False):
            if name is None:
                if label != want:
                    return Binding(False, {}, False)
            else:
                bound[name] = label
        return Binding(True, bound, len(prefix) == len(self.labels))


def match_conditions(op: ListNamespacesOp) -> list[tuple[str, tuple[str, ...]]]:
    """A ``list_namespaces``' conditions, checked: ``(match type, labels)``."""
    conditions: list[tuple[str, tuple[str, ...]]] = []
    for condition in op.match_conditions or ():
        if condition.match_type not in ("prefix", "suffix"):
            raise InvalidStoreRequestError(
                f"namespace match type {condition.match_type!r} is neither 'prefix' nor 'suffix'"
            )
        path = (condition.path,) if isinstance(condition.path, str) else condition.path
        conditions.append((condition.match_type, check_labels(path, "namespace pattern")))
    for name in ("limit", "offset"):
        value = getattr(op, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidStoreRequestError(
                f"list_namespaces {name} {value!r} is not a whole number >= 0"
            )
    if op.max_depth is not None and (
        isinstance(op.max_depth, bool) or not isinstance(op.max_depth, int) or op.max_depth < 1
    ):
        raise InvalidStoreRequestError(f"max_depth {op.max_depth!r} is not a whole number >= 1")
    return conditions
