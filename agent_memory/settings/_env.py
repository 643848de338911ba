"""The base of every settings class: a bad value becomes one :class:`SettingsError` that names
the environment variable it came from, the value, and what was expected, instead of pydantic's
multi-line ``ValidationError`` (which names only the field, and for a typo in a shell
variable sends the user hunting for which variable that was)."""

from __future__ import annotations

from typing import Any, get_args

from pydantic import SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from agent_memory.errors import SettingsError

# pydantic's words for a validator's own message (which says what is wrong in its own words)
_OWN = ("Value error, ", "Assertion failed, ")
_BOUNDS = ("greater than", "less than")


def env_names(prefix: str, name: str, field: FieldInfo) -> list[str]:
    """The environment variables a field is read from, first the one a user would set."""
    choices = getattr(field.validation_alias, "choices", None)
    if choices:  # e.g. DATABASE_URL or AGENT_MEMORY_DB_URL
        return [str(c) for c in choices if str(c).isupper()]
    return [f"{prefix}{name}".upper()]


def _is_secret(field: FieldInfo) -> bool:
    annotation = field.annotation
    return annotation is SecretStr or SecretStr in get_args(annotation)


def _expected(message: str) -> str:
    """What was expected, in words: "expected a valid number", or a validator's own message."""
    for prefix in _OWN:
        if message.startswith(prefix):
            return message[len(prefix) :]
    message = message.removeprefix("Input should be ")
    if message.startswith(_BOUNDS):
        message = f"a number {message}"
    return f"expected {message}"


def _field(cls: type[BaseSettings], key: str) -> tuple[str, FieldInfo] | None:
    """The field an error's location names: by its name, or by an alias (DATABASE_URL)."""
    for name, field in cls.model_fields.items():
        choices = getattr(field.validation_alias, "choices", None) or ()
        if key == name or key in [str(c) for c in choices]:
            return name, field
    return None


def _one(
    cls: type[BaseSettings], error: Any, given: dict[str, Any], environ: dict[str, str]
) -> str:
    loc = error.get("loc") or ()
    found = _field(cls, str(loc[0])) if loc else None
    expected = _expected(str(error.get("msg", "")))
    prefix = str(cls.model_config.get("env_prefix", ""))
    if found is None:  # a rule across fields (its message names them)
        return f"settings {prefix}*: {expected}"
    name, field = found
    shown = "(hidden)" if _is_secret(field) else repr(error.get("input"))
    names = env_names(prefix, name, field)
    if name in given or any(n in given for n in names):  # passed in code, not read from a variable
        return f"{cls.__name__}({name}={shown}): {expected}"
    where = next((n for n in names if n in environ), names[0])
    return f"{where}={shown}: {expected}"


def settings_error(cls: type[BaseSettings], exc: ValidationError, given: dict[str, Any]) -> str:
    """One line for all of ``exc``'s errors, each naming its variable, value and expectation."""
    import os

    environ = {k.upper(): v for k, v in os.environ.items()}
    return "; ".join(_one(cls, e, given, environ) for e in exc.errors())


class EnvSettings(BaseSettings):
    """A ``BaseSettings`` whose bad values raise :class:`SettingsError` naming the variable."""

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise SettingsError(settings_error(type(self), exc, values)) from None
