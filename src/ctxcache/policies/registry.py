"""One registry maps policy names to classes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import ConfigError, UnknownPolicyError

if TYPE_CHECKING:
    from .base import Policy

POLICIES: dict[str, type[Policy]] = {}
P = TypeVar("P", bound="type[Policy]")


def register(cls: P) -> P:
    if not cls.name or cls.name in POLICIES:
        raise ValueError(f"policy name {cls.name!r} is empty or taken")
    POLICIES[cls.name] = cls
    return cls


def policy_names() -> list[str]:
    return sorted(POLICIES)


def make_policy(spec: str | Mapping[str, Any], **kw: Any) -> Policy:
    """Build a policy from a name or a mapping ``{"name": ..., **params}``."""
    if isinstance(spec, str):
        name, params = spec, {}
    elif isinstance(spec, Mapping):
        params = dict(spec)
        name = params.pop("name", None)
        if not isinstance(name, str):
            raise ConfigError(f"policy mapping needs a string 'name', got {spec!r}")
    else:
        raise ConfigError(f"policy must be a name or a mapping, got {type(spec).__name__}")
    cls = POLICIES.get(name)
    if cls is None:
        raise UnknownPolicyError(f"unknown policy {name!r}; known: {', '.join(policy_names())}")
    try:
        return cls(**params, **kw)
    except TypeError as exc:
        raise ConfigError(f"policy {name!r}: bad parameters {params!r}: {exc}") from None
