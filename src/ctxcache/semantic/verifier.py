"""Verifiers: a last check that can veto a semantic hit the embedding score let through.

Sentence embeddings rank "Is X safe?" and "Is X not safe?" as near-duplicates (0.98 with MiniLM),
and "How do I create a file?" / "... delete a file?" close too. ``LexicalVerifier`` vetoes a hit
when the two texts differ in what such models blur:
- negation: one text negates and the other does not (counted per text, parity compared);
- antonyms: a word of a known opposite pair appears in one text and its opposite in the other
  (also by prefix: legal/illegal), or the same content words come in another order (A to B / B to A);
- substitution: the same wording with one slot swapped ("boil apples" / "boil avocado");
- entities: capitalised names (not at a sentence start), numbers, quoted strings, code-ish tokens
  (paths, flags, dotted names) differ between the texts.
It is deliberately conservative: a veto costs one recomputation, a false hit serves a wrong answer.
Any callable ``(query, cached) -> bool`` can replace it (e.g. a cross-encoder re-ranker).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable

Verifier = Callable[[str, str], bool]

_NEGATIONS = frozenset(
    [
        "not",
        "no",
        "never",
        "none",
        "nobody",
        "nothing",
        "nowhere",
        "neither",
        "nor",
        "cannot",
        "without",
        "lacks",
        "lack",
        "isn't",
        "aren't",
        "wasn't",
        "weren't",
        "don't",
        "doesn't",
        "didn't",
        "won't",
        "wouldn't",
        "can't",
        "couldn't",
        "shouldn't",
        "mustn't",
        "haven't",
        "hasn't",
        "hadn't",
        "needn't",
        "ain't",
        "avoid",
        "avoids",
        "refuse",
        "refuses",
        "unable",
        "fail",
        "fails",
        "failing",
        "failed",
        "stop",
        "stops",
        "prevent",
        "prevents",
    ]
)
_NEG_PREFIXES = ("un", "in", "im", "il", "ir", "dis", "non")
_PAIRS = """create delete|add remove|insert delete|increase decrease|enable disable|open close|start stop
buy sell|before after|min max|minimum maximum|upload download|encrypt decrypt|import export|install uninstall
compress decompress|lock unlock|mount unmount|push pull|send receive|win lose|allow deny|accept reject
include exclude|show hide|connect disconnect|subscribe unsubscribe|zip unzip|encode decode|raise lower
hot cold|high low|fast slow|cheap expensive|early late|first last|up down|in out|on off|more less|best worst
largest smallest|biggest smallest|longest shortest|increase reduce|gain lose|rise fall|expand shrink
freeze thaw|heat cool|safe dangerous|legal illegal|healthy unhealthy|true false|always never|love hate
left right|north south|east west|above below|inside outside|import export|read write|sort reverse
ascending descending|lowercase uppercase|enter exit|login logout|sign_in sign_out|attach detach|merge split
join split|arrive depart|borrow lend|pros cons|advantages disadvantages|benefits risks|positive negative
maximize minimize|overestimate underestimate|overweight underweight|wet dry|light heavy|old new|young old
rich poor|strong weak|easy hard|simple complex|odd even|over under|same different|similar different|sum difference
add subtract|multiply divide|celsius fahrenheit|kilometers miles|km miles|kg pounds|meters feet|inches centimeters"""
# Gradable adjectives: their comparative and superlative forms are opposites too (hotter/colder, hottest/coldest).
_GRADABLE = """hot cold|cheap expensive|busy quiet|high low|fast slow|big small|large small|long short|early late|safe risky
warm cool|wet dry|light heavy|rich poor|strong weak|easy hard|old young|near far|loud quiet|tall short|wide narrow
thick thin|deep shallow|clean dirty|bright dark|happy sad|healthy unhealthy|popular unpopular|good bad"""
_PAIRS += (
    "|increase lower|raise reduce|boost reduce|boost lower|boost decrease|most least|more fewer|good bad|better worse"
)
_IRREGULAR = {"good": ("better", "best"), "bad": ("worse", "worst"), "far": ("farther", "farthest")}


def _graded(adj: str) -> tuple[str, str]:
    """Comparative and superlative by the regular spelling rules (hot -> hotter, busy -> busiest)."""
    if adj in _IRREGULAR:
        return _IRREGULAR[adj]
    if len(adj) > 6 or adj.startswith("un"):
        return f"more {adj}", f"most {adj}"
    if adj.endswith("y"):
        return adj[:-1] + "ier", adj[:-1] + "iest"
    if adj.endswith("e"):
        return adj + "r", adj + "st"
    cvc = len(adj) >= 3 and adj[-1] not in "aeiouwxy" and adj[-2] in "aeiou" and adj[-3] not in "aeiou"
    stem = adj + adj[-1] if cvc else adj
    return stem + "er", stem + "est"


_OPPOSITE: dict[str, set[str]] = {}


def _oppose(a: str, b: str) -> None:
    _OPPOSITE.setdefault(a, set()).add(b)
    _OPPOSITE.setdefault(b, set()).add(a)


for _pair in _PAIRS.replace("\n", "|").split("|"):
    _oppose(*_pair.split())
for _pair in _GRADABLE.replace("\n", "|").split("|"):
    _a, _b = _pair.split()
    _oppose(_a, _b)
    for _fa, _fb in zip(_graded(_a), _graded(_b)):  # "most expensive" vs "cheapest": the adjective opposes
        _oppose(_fa.split()[-1], _fb.split()[-1])

_TOKEN = re.compile(r"[A-Za-z][\w'-]*|\d[\d.,:/]*|\S")
_CODEISH = re.compile(r"(?:[\w-]*[./\\_=][\w./\\=-]+|(?<!\S)--?[a-z][\w-]*)")
_QUOTED = re.compile(r"(?<!\w)[\"'`“‘]([^\"'`”’]{1,80})[\"'`”’](?!\w)")
_SENTENCE_START = {".", "?", "!", ":", ";", '"', "(", "-"}
_FUNCTION_WORDS = frozenset(
    [
        "i",
        "a",
        "an",
        "the",
        "what",
        "how",
        "why",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "whose",
        "is",
        "are",
        "was",
        "were",
        "do",
        "does",
        "did",
        "can",
        "could",
        "should",
        "would",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "my",
        "your",
        "our",
        "their",
        "its",
        "his",
        "her",
        "in",
        "on",
        "at",
        "of",
        "for",
        "to",
        "from",
        "by",
        "with",
        "and",
        "or",
        "if",
        "then",
        "than",
        "this",
        "that",
        "these",
        "those",
        "be",
        "been",
        "being",
        "it",
        "me",
        "we",
        "you",
        "they",
        "he",
        "she",
        "them",
        "us",
        "please",
        "tell",
        "explain",
        "give",
        "show",
    ]
)


def _name(tok: str) -> str:
    t = tok.casefold().replace("’", "'")
    return t[:-2] if t.endswith("'s") else t


def _words(text: str) -> list[str]:
    return [w.casefold().replace("’", "'") for w in _TOKEN.findall(text)]


def _negations(words: list[str]) -> int:
    return sum(w in _NEGATIONS or w.endswith("n't") for w in words)


def _entities(text: str) -> set[str]:
    """Names, numbers, quoted strings and code-ish tokens, case-folded."""
    out = {m.group(1).casefold() for m in _QUOTED.finditer(text)}
    out |= {m.group(0).casefold().rstrip(".") for m in _CODEISH.finditer(text) if any(c.isalpha() for c in m.group(0))}
    prev = "."
    for tok in _TOKEN.findall(text):
        if tok[0].isdigit():
            out.add(tok.rstrip(".,").replace(",", ""))
        elif (
            tok[0].isupper()
            and (prev not in _SENTENCE_START or tok.isupper())
            and tok.casefold() not in _FUNCTION_WORDS
        ):
            out.add(_name(tok))  # not a sentence start: a name (or an acronym anywhere)
        prev = tok
    return out


def _antonym_clash(a: list[str], b: list[str]) -> bool:
    sa, sb = set(a), set(b)
    only_a, only_b = sa - sb, sb - sa
    if any(_OPPOSITE.get(w, set()) & only_b for w in only_a):
        return True
    # Prefix negation: "legal" / "illegal", "healthy" / "unhealthy", "accessible" / "inaccessible".
    return any(w.startswith(p) and w[len(p) :] in other for x, other in ((only_a, sb), (only_b, sa))
               for w in x for p in _NEG_PREFIXES if len(w) > len(p) + 3)  # fmt: skip


def _reordered(a: list[str], b: list[str]) -> bool:
    """Two content words trade places: "Celsius to Fahrenheit" / "Fahrenheit to Celsius".

    Only when both texts use the same content words and one order becomes the other by swapping
    exactly two of them (moving a clause, as paraphrases do, is a rotation, not a swap).
    """
    ca = [w for w in a if w[0].isalnum() and w not in _FUNCTION_WORDS]
    cb = [w for w in b if w[0].isalnum() and w not in _FUNCTION_WORDS]
    if len(ca) < 3 or len(ca) != len(cb) or sorted(ca) != sorted(cb):
        return False
    diff = [i for i, (x, y) in enumerate(zip(ca, cb)) if x != y]
    return len(diff) == 2 and ca[diff[0]] == cb[diff[1]] and ca[diff[1]] == cb[diff[0]]


def _substitution(a: list[str], b: list[str]) -> bool:
    """Same wording with one slot (1-2 words) swapped: "symptoms of flu" / "symptoms of measles".

    Paraphrases reword; a question that differs from another in exactly one content slot
    almost always asks about something else. Costs some recall (synonym swaps), never precision.
    """
    wa = [w for w in a if w[0].isalnum()]
    wb = [w for w in b if w[0].isalnum()]
    ops = [op for op in difflib.SequenceMatcher(a=wa, b=wb, autojunk=False).get_opcodes() if op[0] != "equal"]
    if len(ops) != 1 or ops[0][0] != "replace":
        return False
    _, i1, i2, j1, j2 = ops[0]
    content_a, content_b = set(wa[i1:i2]) - _FUNCTION_WORDS, set(wb[j1:j2]) - _FUNCTION_WORDS
    same = len(wa) - (i2 - i1)
    return i2 - i1 <= 2 and j2 - j1 <= 2 and same >= 3 and bool(content_a) and bool(content_b)


def _missing(entities: set[str], other: str) -> bool:
    """Some entity of one text does not occur as a whole word (any case) in the other."""
    low = other.casefold().replace("’", "'")
    return any(re.search(r"(?<!\w)" + re.escape(e) + r"(?!\w)", low) is None for e in entities)


class LexicalVerifier:
    """Veto on negation parity, opposite words, a one-slot substitution, or differing names/numbers/code."""

    def __init__(
        self, *, negation: bool = True, antonyms: bool = True, entities: bool = True, substitution: bool = True
    ) -> None:
        self.negation, self.antonyms, self.entities, self.substitution = negation, antonyms, entities, substitution
        self.vetoes: dict[str, int] = {"negation": 0, "antonym": 0, "order": 0, "substitution": 0, "entity": 0}

    def reason(self, query: str, cached: str) -> str | None:
        """Why the hit is vetoed, or None when it may be served."""
        a, b = _words(query), _words(cached)
        if self.negation and _negations(a) % 2 != _negations(b) % 2:
            return "negation"
        if self.antonyms and _antonym_clash(a, b):
            return "antonym"
        if self.antonyms and _reordered(a, b):
            return "order"
        if self.substitution and _substitution(a, b):
            return "substitution"
        # A name must occur in both texts, in any case: users type "python" for "Python".
        if self.entities and (_missing(_entities(query), cached) or _missing(_entities(cached), query)):
            return "entity"
        return None

    def __call__(self, query: str, cached: str) -> bool:
        why = self.reason(query, cached)
        if why is not None:
            self.vetoes[why] += 1
        return why is None
