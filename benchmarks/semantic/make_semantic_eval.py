"""Generate the semantic-cache evaluation set: labelled question pairs, written for this project.

Run: .venv/bin/python benchmarks/semantic/make_semantic_eval.py   (writes benchmarks/data/semantic_pairs.jsonl)

Each intent has slots (entities, numbers, operations) and 3-6 hand-written phrasings. From a seeded
RNG the script draws:
- paraphrase (label 1): two different phrasings of one intent with the same slot values, some
  lower-cased or without the question mark as users type them;
- negation (0): the same question with its meaning negated ("Is X safe" / "Is X not safe");
- antonym (0): the same phrasing with an operation swapped for its opposite (create/delete);
- entity / number (0): the same phrasing with one entity or number changed;
- topic (0): the same entity under another intent ("capital of Peru" / "population of Peru");
- unrelated (0): two different intents.
``split`` is "dev" or "test" by intent (a fixed list), so a threshold tuned on dev is reported on
intents it never saw. ~90 hand-written pairs in free wording (semantic_handwritten.py, intent
"handwritten") alternate between dev and test. History, in docs/semantic-cache.md: they were written
after the verifier's first version, which they showed to miss role swaps and loose negations. Limits: English, templated, and the verifier's word lists and these templates
have one author: real traffic will be harder (see docs/semantic-cache.md).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from semantic_handwritten import PAIRS as HANDWRITTEN

SEED = 13
OUT = Path(__file__).resolve().parents[1] / "data" / "semantic_pairs.jsonl"

COUNTRIES = ["France", "Spain", "Japan", "Brazil", "Canada", "Kenya", "Norway", "Egypt", "Peru", "India", "Chile",
             "Vietnam", "Poland", "Ghana", "Mexico", "Turkey", "Ireland", "Morocco"]  # fmt: skip
CITIES = ["Paris", "Tokyo", "Berlin", "Madrid", "Chicago", "Sydney", "Toronto", "Cairo", "Lima", "Oslo", "Nairobi",
          "Seoul", "Lisbon", "Denver", "Mumbai", "Dublin"]  # fmt: skip
LANGS = [
    "Python",
    "Java",
    "Rust",
    "Go",
    "JavaScript",
    "Ruby",
    "Kotlin",
    "Swift",
    "PHP",
    "TypeScript",
    "Scala",
    "Haskell",
]
COMPANIES = ["Microsoft", "Toyota", "Nike", "Samsung", "Netflix", "Spotify", "IKEA", "Airbnb", "Nintendo", "Lego"]
ANIMALS = ["dogs", "cats", "rabbits", "parrots", "horses", "hamsters", "guinea pigs", "ferrets"]
FOODS = ["chocolate", "grapes", "onions", "carrots", "apples", "cheese", "garlic", "avocado", "bananas", "peanuts"]
DISEASES = ["flu", "measles", "diabetes", "asthma", "anemia", "migraine", "malaria", "shingles", "gout", "bronchitis"]
METRICS = ["credit score", "metabolism", "battery life", "website traffic", "blood pressure", "heart rate",
           "water intake", "screen time"]  # fmt: skip
TOOLS = [("git", "branch"), ("docker", "container"), ("Linux", "user"), ("PostgreSQL", "table"), ("Kubernetes", "pod"),
         ("AWS", "bucket"), ("MySQL", "database"), ("npm", "package")]  # fmt: skip
OPS = [("create", "delete"), ("start", "stop"), ("enable", "disable"), ("lock", "unlock"), ("install", "uninstall"),
       ("import", "export"), ("upload", "download"), ("encrypt", "decrypt"), ("compress", "decompress"),
       ("open", "close"), ("connect", "disconnect"), ("mount", "unmount")]  # fmt: skip
SYN = {"create": ["make a new", "set up a new", "add a new"], "delete": ["remove a", "get rid of a", "erase a"]}
UNITS = [("kilometers", "miles"), ("kg", "pounds"), ("celsius", "fahrenheit"), ("meters", "feet"), ("liters", "gallons"),
         ("inches", "centimeters")]  # fmt: skip
CONTRASTS = [("best", "worst"), ("cheapest", "most expensive"), ("hottest", "coldest"), ("busiest", "quietest")]

# intent -> (slot kinds, phrasings). Slots: {c} country, {x} city, {l} language, {co} company, {a} animal,
# {f} food, {d} disease, {m} metric, {t}/{o} tool and object, {op} operation, {n} number, {u1}/{u2} units.
INTENTS: dict[str, list[str]] = {
    "capital": ["What is the capital of {c}?", "What's {c}'s capital city?", "Which city is the capital of {c}?",
                "Tell me the capital of {c}.", "Name the capital city of {c}."],
    "population": ["What is the population of {x}?", "How many people live in {x}?", "How populous is {x}?",
                   "What's the number of inhabitants of {x}?", "Roughly how many residents does {x} have?"],
    "local_time": ["What time is it in {x} right now?", "What's the current local time in {x}?",
                   "Tell me the time in {x} now.", "Current time in {x}?"],
    "founder": ["Who founded {co}?", "Who was the founder of {co}?", "Who started the company {co}?",
                "{co} was founded by whom?", "Which person created {co}?"],
    "symptoms": ["What are the symptoms of {d}?", "What are the signs that someone has {d}?",
                 "How can I tell if I have {d}?", "Which symptoms does {d} cause?", "What does {d} feel like?"],
    "food_safe": ["Is it safe for {a} to eat {f}?", "Can {a} safely eat {f}?", "Are {f} safe to feed to {a}?",
                  "Is feeding {f} to {a} okay?", "Should {a} be given {f} to eat?"],
    "learn_lang": ["What is the best way to learn {l}?", "How should a beginner start learning {l}?",
                   "What's a good path for learning {l} from scratch?", "How do I get started with {l}?",
                   "Any advice for picking up {l} as a first language?"],
    "typed": ["Is {l} statically typed?", "Does {l} use static typing?", "Is {l} a statically typed language?",
              "Are types in {l} checked at compile time?"],
    "tool_op": ["How do I {op} a {o} in {t}?", "What is the command to {op} a {o} in {t}?",
                "In {t}, how can I {op} a {o}?", "Show me how to {op} a {o} with {t}.",
                "What's the way to {op} a {o} using {t}?"],
    "metric_up": ["How can I increase my {m}?", "What are ways to increase my {m}?", "Tips to increase my {m}?",
                  "What should I do to increase my {m}?", "How do I make my {m} go up?"],
    "convert": ["Convert {n} {u1} to {u2}.", "How many {u2} is {n} {u1}?", "What is {n} {u1} in {u2}?",
                "{n} {u1} equals how many {u2}?", "Change {n} {u1} into {u2}."],
    "visit": ["What is the best time of year to visit {c}?", "When is the best season to travel to {c}?",
              "Which month is best for a trip to {c}?", "When should I go to {c} for the best weather?"],
    "boil": ["How long should I boil {f}?", "What's the boiling time for {f}?", "For how many minutes do I boil {f}?",
             "How many minutes does it take to boil {f}?"],
    "compile_why": ["Why does my {l} code compile?", "Why is my {l} program compiling?",
                    "What makes my {l} code compile?", "How come my {l} code compiles?"],
    "sleep": ["How many hours of sleep does a {n}-year-old need?", "How much sleep should a {n} year old get?",
              "What's the recommended sleep for a child aged {n}?", "Recommended hours of sleep at age {n}?"],
}  # fmt: skip
DEV_INTENTS = {"capital", "founder", "food_safe", "typed", "tool_op", "convert", "boil", "sleep"}

# Negations: (positive form, negated form) per intent, same slots.
NEGATIONS: dict[str, list[tuple[str, str]]] = {
    "food_safe": [("Is it safe for {a} to eat {f}?", "Is it not safe for {a} to eat {f}?"),
                  ("Can {a} safely eat {f}?", "Can't {a} safely eat {f}?"),
                  ("Which foods like {f} are safe for {a}?", "Which foods like {f} are not safe for {a}?")],
    "typed": [("Is {l} statically typed?", "Is {l} not statically typed?"),
              ("Does {l} use static typing?", "Doesn't {l} use static typing?"),
              ("Why is {l} statically typed?", "Why is {l} never statically typed?")],
    "compile_why": [("Why does my {l} code compile?", "Why doesn't my {l} code compile?"),
                    ("Why is my {l} program compiling?", "Why is my {l} program not compiling?"),
                    ("How come my {l} code compiles?", "How come my {l} code never compiles?")],
    "symptoms": [("What are the symptoms of {d}?", "What are not symptoms of {d}?"),
                 ("Which symptoms does {d} cause?", "Which symptoms does {d} not cause?"),
                 ("Is fever a symptom of {d}?", "Is fever not a symptom of {d}?")],
    "visit": [("Should I visit {c} in winter?", "Should I not visit {c} in winter?"),
              ("Is it a good idea to visit {c} in summer?", "Is it not a good idea to visit {c} in summer?")],
    "learn_lang": [("Should beginners learn {l}?", "Should beginners never learn {l}?"),
                   ("Is {l} good for beginners?", "Is {l} no good for beginners?")],
    "tool_op": [("Can I {op} a {o} in {t} without root access?", "Can I {op} a {o} in {t} with root access?"),
                ("Is it possible to {op} a {o} in {t}?", "Is it not possible to {op} a {o} in {t}?")],
}  # fmt: skip


def fill(template: str, slots: dict[str, Any]) -> str:
    return template.format(**slots)


def draw_slots(intent: str, rng: random.Random) -> dict[str, Any]:
    t, o = rng.choice(TOOLS)
    u1, u2 = rng.choice(UNITS)
    age = rng.choice([2, 4, 6, 9, 12, 15, 17])
    return {"c": rng.choice(COUNTRIES), "x": rng.choice(CITIES), "l": rng.choice(LANGS), "co": rng.choice(COMPANIES),
            "a": rng.choice(ANIMALS), "f": rng.choice(FOODS), "d": rng.choice(DISEASES), "m": rng.choice(METRICS),
            "t": t, "o": o, "op": rng.choice(OPS)[0], "n": age if intent == "sleep" else rng.choice([3, 5, 8, 12, 20, 42, 100]),
            "u1": u1, "u2": u2}  # fmt: skip


def casual(text: str, rng: random.Random) -> str:
    """How people type: sometimes lower case, sometimes no final punctuation."""
    if rng.random() < 0.25:
        text = text.lower()
    if rng.random() < 0.3:
        text = text.rstrip("?.")
    return text


def changed(slots: dict[str, Any], template: str, rng: random.Random) -> tuple[dict[str, Any], str] | None:
    """The same slots with one entity (or number) in ``template`` replaced; None if it has none."""
    pools = {"c": COUNTRIES, "x": CITIES, "l": LANGS, "co": COMPANIES, "a": ANIMALS, "f": FOODS, "d": DISEASES,
             "m": METRICS, "n": [3, 5, 8, 12, 20, 42, 100, 7, 16]}  # fmt: skip
    keys = [k for k in pools if "{" + k + "}" in template]
    if not keys:
        return None
    k = rng.choice(keys)
    new = dict(slots)
    new[k] = rng.choice([v for v in pools[k] if v != slots[k]])
    return new, "number" if k == "n" else "entity"


def generate(seed: int = SEED) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    names = sorted(INTENTS)
    rows: list[dict[str, Any]] = []

    def add(a: str, b: str, label: int, category: str, intent: str) -> None:
        split = "dev" if intent in DEV_INTENTS else "test"
        rows.append({"a": a, "b": b, "label": label, "category": category, "intent": intent, "split": split})

    for _ in range(36):  # paraphrases: 36 rounds x 15 intents
        for intent in names:
            slots = draw_slots(intent, rng)
            p, q = rng.sample(INTENTS[intent], 2)
            a, b = fill(p, slots), casual(fill(q, slots), rng)
            if intent == "tool_op" and slots["op"] in SYN and rng.random() < 0.5:
                b = b.replace(f"{slots['op']} a", rng.choice(SYN[slots["op"]]), 1)
            add(a, b, 1, "paraphrase", intent)
    for _ in range(8):  # negations: 8 rounds x 7 intents x 2-3 forms
        for intent, forms in NEGATIONS.items():
            slots = draw_slots(intent, rng)
            for pos, neg in rng.sample(forms, min(2, len(forms))):
                a, b = fill(pos, slots), fill(neg, slots)
                add(*((a, b) if rng.random() < 0.5 else (b, a)), 0, "negation", intent)
    for _ in range(60):  # antonyms: swapped operation, metric direction, or contrast
        kind = rng.choice(["tool_op", "tool_op", "metric_up", "visit"])
        slots = draw_slots(kind, rng)
        if kind == "tool_op":
            op, anti = rng.choice(OPS)
            tpl = rng.choice(INTENTS["tool_op"])
            a, b = fill(tpl, {**slots, "op": op}), fill(tpl, {**slots, "op": anti})
        elif kind == "metric_up":
            tpl = rng.choice(INTENTS["metric_up"][:4])
            a, b = fill(tpl, slots), fill(tpl, slots).replace("increase", rng.choice(["decrease", "reduce", "lower"]))
        else:
            best, worst = rng.choice(CONTRASTS)
            a = f"What is the {best} time of year to visit {slots['c']}?"
            b = f"What is the {worst} time of year to visit {slots['c']}?"
        add(a, b, 0, "antonym", kind)
    for _ in range(12):  # changed entity or number, same phrasing: 12 rounds x 15 intents
        for intent in names:
            slots = draw_slots(intent, rng)
            tpl = rng.choice(INTENTS[intent])
            got = changed(slots, tpl, rng)
            if got is not None:
                add(fill(tpl, slots), casual(fill(tpl, got[0]), rng), 0, got[1], intent)
    topic_pairs = [("capital", "visit"), ("population", "local_time"), ("symptoms", "food_safe"), ("typed", "learn_lang"),
                   ("compile_why", "typed"), ("boil", "food_safe")]  # fmt: skip
    for _ in range(20):  # same entity, other question
        i1, i2 = rng.choice(topic_pairs)
        slots = draw_slots(i1, rng)
        add(fill(rng.choice(INTENTS[i1]), slots), fill(rng.choice(INTENTS[i2]), slots), 0, "topic", i1)
    for _ in range(150):  # unrelated questions
        i1, i2 = rng.sample(names, 2)
        add(fill(rng.choice(INTENTS[i1]), draw_slots(i1, rng)), fill(rng.choice(INTENTS[i2]), draw_slots(i2, rng)), 0,
            "unrelated", i1)  # fmt: skip
    for i, (a, b, label, category) in enumerate(HANDWRITTEN):  # alternate: both splits get free wording
        rows.append({"a": a, "b": b, "label": label, "category": category, "intent": "handwritten",
                     "split": "dev" if i % 2 == 0 else "test"})  # fmt: skip
    seen: set[tuple[str, str]] = set()
    out = []
    for r in rows:  # no duplicate pairs; a "changed" pair that came out identical is dropped
        key = (r["a"], r["b"])
        if key in seen or r["a"].casefold().rstrip("?. ") == r["b"].casefold().rstrip("?. "):
            continue
        seen.add(key)
        out.append({"id": len(out), **r})
    return out


def main() -> None:
    rows = generate()
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    cats: dict[str, int] = {}
    for r in rows:
        cats[r["category"]] = cats.get(r["category"], 0) + 1
    print(json.dumps({"file": str(OUT), "pairs": len(rows), "categories": cats, "seed": SEED}))


if __name__ == "__main__":
    main()
