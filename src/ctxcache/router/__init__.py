"""The cache-aware router (docs/routing.md): an index of the fleet's blocks, a scoring rule, a proxy."""
