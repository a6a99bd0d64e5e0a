"""Eviction policies: one file each, one registry (``make_policy``, ``policy_names``)."""

from . import fifo, lfu, lfu_decay, lru  # noqa: F401  (import registers)
from .base import CanEvict, Key, OrderedPolicy, Policy, ScoredPolicy
from .registry import POLICIES, make_policy, policy_names, register

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
