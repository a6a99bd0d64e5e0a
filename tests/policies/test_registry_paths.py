"""The registry's errors (registry.py): a config naming an unknown policy gets the known names,
each one usable as is."""

from __future__ import annotations

import pytest

from ctxcache.errors import UnknownPolicyError
from ctxcache.policies import make_policy, policy_names


@pytest.mark.parametrize("spec", ["mru", {"name": "mru"}])
def test_an_unknown_policy_lists_every_known_name(spec):
    with pytest.raises(UnknownPolicyError) as err:
        make_policy(spec)
    known = str(err.value).split("known: ", 1)[1].split(", ")
    assert known == policy_names()
    for name in known:
        make_policy(name)  # each listed name builds a policy
