"""Cache-aware progressive truncation for conversations longer than the context window.

Naive truncation drops the oldest tokens so the prompt just fits: the first kept token moves with
every turn, so no two requests share a prefix beyond the system prompt, and every turn re-prefills
the whole window. The stable cut drops whole turns, and only when the prompt would not fit; it
then drops enough of them to get under a low-water mark (``low`` of the limit), so the same cut
serves the following turns and their prompts keep hitting the cache. The cut is a pure function
of the conversation's turn lengths, so a stateless server (or a restarted one) finds the same one.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["naive_prompt", "stable_cut", "stable_prompt"]


def _check(limit: int, system: Sequence[int], turns: Sequence[Sequence[int]]) -> None:
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if len(system) >= limit:
        raise ValueError(f"the system prompt ({len(system)} tokens) does not fit in {limit}")
    if not turns:
        raise ValueError("a conversation needs at least one turn")


def naive_prompt(system: Sequence[int], turns: Sequence[Sequence[int]], limit: int) -> list[int]:
    """System prompt + the last ``limit - len(system)`` tokens of the turns."""
    _check(limit, system, turns)
    body = [t for turn in turns for t in turn]
    return [*system, *body[max(0, len(body) - (limit - len(system))) :]]


def stable_cut(lengths: Sequence[int], system: int, limit: int, low: float = 0.6) -> int:
    """Index of the first turn kept for the last request of a conversation with these turn lengths."""
    if not 0.0 < low <= 1.0:
        raise ValueError(f"low must be in (0, 1], got {low}")
    cut, total = 0, system
    for i, n in enumerate(lengths):
        total += n
        if total > limit:  # replay the history: the cut only moves when a prompt overflows
            target = max(system + lengths[i], int(low * limit))
            while total > target and cut < i:
                total -= lengths[cut]
                cut += 1
    return cut


def stable_prompt(system: Sequence[int], turns: Sequence[Sequence[int]], limit: int, low: float = 0.6) -> list[int]:
    """System prompt + whole turns from a stable cut; a last turn longer than the window is cut naively."""
    _check(limit, system, turns)
    cut = stable_cut([len(t) for t in turns], len(system), limit, low)
    prompt = [*system, *(t for turn in turns[cut:] for t in turn)]
    return prompt if len(prompt) <= limit else naive_prompt(system, turns, limit)
