"""Eviction policies: one file each, one registry (``make_policy``, ``policy_names``).

Every module in this package is imported here, and each registers its class with ``@register``,
so adding a policy is adding a file.
"""

import importlib
import pkgutil

from .base import CanEvict, Key, OrderedPolicy, Policy, ScoredPolicy
from .registry import POLICIES, make_policy, policy_names, register

for _mod in pkgutil.iter_modules(__path__):
    if _mod.name not in ("base", "registry"):
        importlib.import_module(f"{__name__}.{_mod.name}")

__all__ = [
    "POLICIES",
    "CanEvict",
    "Key",
    "OrderedPolicy",
    "Policy",
    "ScoredPolicy",
    "make_policy",
    "policy_names",
    "register",
]
