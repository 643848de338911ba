"""Explicit forwarding of a public method to the part that implements it: the
`agent_memory.manager.MemoryManager` is one object for its callers, and each thing it
does lives in a part of its own (``inject = forward("_injector", Injector.inject)``).

On an instance, a forwarded name is the part's bound method itself (no extra call on the hot
path), typed as the part's method is; on the class, it is a function of the owner's module and
name with the part's docstring and signature, which is what documentation tools and
``inspect`` read.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

P = ParamSpec("P")
R = TypeVar("R")
Part = TypeVar("Part")


class forward(Generic[Part, P, R]):
    """``name = forward(attribute, Part.method)``: ``owner.name(...)`` calls
    ``owner.<attribute>.method(...)``."""

    def __init__(self, attribute: str, method: Callable[Concatenate[Part, P], R]) -> None:
        self.attribute = attribute
        self.method = method
        self.name = method.__name__
        self.face: Callable[..., Any] = method

    def __set_name__(self, owner: type, name: str) -> None:
        if name != self.name:
            raise TypeError(f"{owner.__name__}.{name} forwards to a method named {self.name}")
        make = _async_face if inspect.iscoroutinefunction(self.method) else _sync_face
        face = functools.update_wrapper(make(self.attribute, name), self.method)
        face.__module__, face.__qualname__ = owner.__module__, f"{owner.__qualname__}.{name}"
        self.face = face

    @overload
    def __get__(self, owner: None, kind: type | None = None) -> Callable[..., Any]: ...

    @overload
    def __get__(self, owner: object, kind: type | None = None) -> Callable[P, R]: ...

    def __get__(self, owner: object | None, kind: type | None = None) -> Callable[..., Any]:
        if owner is None:
            return self.face
        bound: Callable[P, R] = getattr(getattr(owner, self.attribute), self.name)
        return bound


def _async_face(attribute: str, name: str) -> Callable[..., Any]:
    async def face(owner: Any, *args: Any, **kwargs: Any) -> Any:
        return await getattr(getattr(owner, attribute), name)(*args, **kwargs)

    return face


def _sync_face(attribute: str, name: str) -> Callable[..., Any]:
    def face(owner: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(getattr(owner, attribute), name)(*args, **kwargs)

    return face
