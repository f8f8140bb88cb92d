"""Request bodies declared as pydantic models, read with one rule: `read_body(Model, raw)` returns the model or raises
`BadBody` with a message that names the field and what is wrong: `"runner_id" is required`, `"max" has the wrong
type: bool`, `"records" must be one of all, final, none`, `"attempts[0]" must be a {"rollout_id", "attempt_id"}
object`.

The rule every body here follows: strict types (a bool is not a number, a string is not a list), finite numbers
only, unknown fields ignored, and a field sent as `null` is a field not sent (its default applies). `between` and
`holding` declare bounds whose message says them whole; `shaped` refuses a nested object's wrong shape in words. The
collector's queue routes and the reward-model service declare their bodies with these.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticCustomError

Model = TypeVar("Model", bound=BaseModel)


class BadBody(ValueError):
    """A request body that is not what its route declares (HTTP 400); the message says which field and why."""


class Body(BaseModel):
    """The base of every declared body (see the module docstring for its rule)."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="ignore", frozen=True)


def read_body(model: type[Model], raw: object) -> Model:
    """`raw` (decoded JSON) as `model`; `BadBody` naming the first thing wrong."""
    if not isinstance(raw, dict):
        raise BadBody("the body must be a JSON object")
    try:
        return model.model_validate({key: value for key, value in raw.items() if value is not None})
    except ValidationError as exc:
        raise BadBody(_said(exc.errors()[0])) from None


def _said(error: Any) -> str:
    path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]).lstrip(".")
    field = f'"{path or "body"}"'
    kind = error["type"]
    if kind == "said":  # a validator's own words, whole
        return str(error["msg"])
    if kind == "missing":
        return f"{field} is required"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return f"{field} has the wrong type: {type(error['input']).__name__}"
    if kind == "literal_error":
        return f"{field} must be one of {error['ctx']['expected'].replace(' or ', ', ').replace(chr(39), '')}"
    if kind == "finite_number":
        return f"{field} must be a finite number, got {error['input']}"
    return f"{field} {error['msg'][0].lower()}{error['msg'][1:]}"


def between(low: float, high: float) -> AfterValidator:
    """A number from `low` to `high`, inclusive."""

    def check(value: float) -> float:
        if not low <= value <= high:
            raise PydanticCustomError("bounds", f"must be between {low:g} and {high:g}")
        return value

    return AfterValidator(check)


def holding(low: int, high: int, what: str) -> AfterValidator:
    """A list of `low` to `high` items (`what` they are, for the message)."""

    def check(value: list[Any]) -> list[Any]:
        if not low <= len(value) <= high:
            raise PydanticCustomError("bounds", f"must be a list of {low} to {high} {what}")
        return value

    return AfterValidator(check)


def said(message: str) -> PydanticCustomError:
    """An error whose message is `message`, whole (raise it from a validator)."""
    return PydanticCustomError("said", message)


def shaped(description: str) -> Callable[[Any], Any]:
    """A `model_validator(mode="before")` body: anything but an object is refused with `description` (what the
    object must hold), not pydantic's type name."""

    def check(value: Any) -> Any:
        if not isinstance(value, dict):
            raise PydanticCustomError("shape", f"must be {description}")
        return value

    return check


__all__ = ["BadBody", "Body", "between", "holding", "read_body", "said", "shaped"]
