"""ctxcache: a dynamic context (KV) cache for LLM inference."""

from .cache import ContextCache, EngineOptions, Match
from .config import CacheConfig, TierConfig, load_config, parse_size
from .errors import (
    ConfigError,
    CorruptBlockError,
    CtxCacheError,
    DeleteFailedError,
    InvalidTokensError,
    MatchReleasedError,
    MissingDependencyError,
    PayloadError,
    TierUnavailableError,
    TokenTypeError,
    TraceError,
    UnknownPolicyError,
    UnknownTierError,
)
from .index import RadixIndex
from .keys import BlockHasher, Namespace, Prompt
from .policies import Policy, make_policy, policy_names
from .tiers import DiskTier, MemoryTier, RedisTier, Tier
from .usage import Usage

__version__ = "0.1.0"

__all__ = [
    "BlockHasher",
    "CacheConfig",
    "ConfigError",
    "ContextCache",
    "CorruptBlockError",
    "CtxCacheError",
    "DeleteFailedError",
    "InvalidTokensError",
    "Match",
    "MatchReleasedError",
    "DiskTier",
    "EngineOptions",
    "MemoryTier",
    "MissingDependencyError",
    "Namespace",
    "PayloadError",
    "Policy",
    "Prompt",
    "RadixIndex",
    "RedisTier",
    "Tier",
    "TierConfig",
    "TierUnavailableError",
    "TokenTypeError",
    "TraceError",
    "UnknownPolicyError",
    "UnknownTierError",
    "Usage",
    "__version__",
    "load_config",
    "make_policy",
    "parse_size",
    "policy_names",
]
