"""From configuration to the engine: each tier of a config, each tier's policy, and the engine's
options (``engine_options``).

The only module of the engine that reads the config schema (``config.CacheConfig``,
``config.TierConfig``), so tiers stay storage only and the engine core takes plain objects.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence

from ..config import CacheConfig, TierConfig
from ..errors import ConfigError, UnknownTierError
from ..policies import Policy, make_policy
from ..tiers import TIERS, Tier
from ..units import Clock
from .options import EngineOptions
from .slot import Slot
from .tenancy import load_tenancy

# The EngineOptions a config cannot hold (live objects): the caller of ``from_config`` passes them.
# Every other option comes from the config here (tests/engine/test_options.py checks both lists).
NOT_IN_CONFIG = frozenset({"clock"})


def engine_options(cfg: CacheConfig) -> EngineOptions:
    """The engine options a config sets: every ``EngineOptions`` key but ``NOT_IN_CONFIG``.
    The tenant tables are checked here, before any tier opens (a bad table opens nothing)."""
    return EngineOptions(
        block_size=cfg.block_size,
        hash=cfg.hash,
        model=cfg.model,
        salt=cfg.salt,
        promote=cfg.promote,
        write_buffer=cfg.write_buffer,
        write_lag=cfg.write_lag,
        tenancy=load_tenancy(cfg.tenants, cfg.tenancy),
        erasure_journal=cfg.erasure_journal,
    )


def make_tier(i: int, tc: TierConfig, block_size: int, clock: Clock) -> Tier:
    """Build tier ``i`` of a config, with errors that name the tier and list the keys it takes."""
    tier_cls = TIERS.get(tc.kind)
    if tier_cls is None:
        raise UnknownTierError(f"tiers[{i}]: unknown kind {tc.kind!r}; known: {', '.join(TIERS)}")  # fastest first
    min_bytes = block_size * 4
    if tc.capacity < min_bytes:
        raise ConfigError(
            f"tiers[{i}] capacity {tc.capacity} B is smaller than one block "
            f"({block_size} tokens need at least {min_bytes} B)"
        )
    policy = make_policy_for(i, tc.policy, clock)  # before the tier: a bad policy opens nothing
    known = {p for c in tier_cls.__mro__ if issubclass(c, Tier) for p in inspect.signature(c).parameters}
    unknown = set(tc.options) - known
    if unknown:
        raise ConfigError(
            f"tiers[{i}] ({tc.kind}): unknown keys {sorted(unknown)}; "
            f"known: {sorted(known - {'capacity', 'policy', 'kw', 'high', 'low', 'write'})}"
        )
    try:
        return tier_cls(tc.capacity, policy, high=tc.high, low=tc.low, write=tc.write, **tc.options)
    except TypeError as exc:
        raise ConfigError(f"tiers[{i}] ({tc.kind}): {exc}") from None


def make_policy_for(i: int, spec: object, clock: Clock) -> Policy:
    """The policy a tier asked for: a Policy object as given, or one built from a name or mapping
    (driven by ``clock``). Offline policies need the future and run in the simulator only."""
    if isinstance(spec, Policy):
        policy = spec
    elif isinstance(spec, (str, Mapping)):
        policy = make_policy(spec, clock=clock)
    else:
        raise ConfigError(f"tiers[{i}]: policy must be a name, a mapping or a Policy, not {type(spec).__name__}")
    if policy.offline:
        raise ConfigError(f"tiers[{i}]: policy {policy.name!r} needs the future; it runs in the simulator only")
    return policy


def make_slots(tiers: Sequence[Tier], clock: Clock, block_size: int) -> list[Slot]:
    """One slot per tier, fastest first (the order is checked here)."""
    if not tiers:
        raise ConfigError("a ContextCache needs at least one tier")
    kinds = [t.slow for t in tiers]
    if kinds != sorted(kinds):
        raise ConfigError("tiers go fastest first: every memory tier before any disk or redis tier")
    _unique_names(tiers)
    slots = []
    for i, tier in enumerate(tiers):
        tier.token_bytes = 4 * block_size
        slot = Slot(i, tier, make_policy_for(i, tier.policy_spec, clock), clock)
        slot.write = write_mode(tiers, i)
        slots.append(slot)
    return slots


def _unique_names(tiers: Sequence[Tier]) -> None:
    """A tier's name is its identity to everything outside the engine (KV events' ``tier``, metrics
    labels, per-tier quotas, usage by tier, the erasure journal): two tiers of one kind left
    unnamed, say a hot and a warm RAM tier, would be one tier there. The later ones get "-2", "-3"
    (the first keeps the kind's name); a name given twice is a configuration error."""
    taken: set[str] = set()
    for i, tier in enumerate(tiers):
        if tier.name in taken:
            if tier.name != tier.kind:
                raise ConfigError(f"tiers[{i}]: the name {tier.name!r} is taken by an earlier tier")
            n = 2
            while f"{tier.kind}-{n}" in taken or any(t.name == f"{tier.kind}-{n}" for t in tiers[i + 1 :]):
                n += 1
            tier.name = f"{tier.kind}-{n}"
        taken.add(tier.name)


def write_mode(tiers: Sequence[Tier], i: int) -> str:
    """Tier ``i``'s write policy: the one it was given, else "through" for a tier other processes
    share (Redis: a block only RAM holds is invisible to them) and for a disk tier with only RAM
    above it (a SIGKILL then loses the last second of stores, not all of RAM); "demote" otherwise
    (a deeper disk or one under Redis: a persistent tier above already holds every block). The top
    tier takes every store anyway: "through" changes nothing there."""
    tier = tiers[i]
    if tier.write is not None:
        return tier.write
    if i == 0 or not tier.slow:
        return "demote"
    if tier.shared or (tier.kind == "disk" and not any(t.slow for t in tiers[:i])):
        return "through"
    return "demote"
