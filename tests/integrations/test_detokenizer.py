"""Incremental detokenization and stop strings, with a toy tokenizer (no model)."""

from __future__ import annotations

import pytest

from ctxcache.integrations import Detokenizer, SamplingParams


class ToyTok:
    def __init__(self, pieces):
        self.pieces = pieces

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.pieces[i] for i in ids)


def run(pieces, stops):
    d = Detokenizer(ToyTok(pieces), stops)
    out, ids, hit = [], [], None
    for i in range(len(pieces)):
        ids.append(i)
        delta, hit = d.push(ids)
        out.append(delta)
        if hit:
            break
    out.append(d.flush())
    return out, d.text, hit


def test_no_stops_streams_every_piece():
    out, text, hit = run(["Hel", "lo", " world"], [])
    assert "".join(out) == text == "Hello world" and hit is None
    assert out[:3] == ["Hel", "lo", " world"]


def test_a_stop_string_split_over_tokens_is_held_back_and_cut():
    out, text, hit = run(["The ", "EN", "D", " more"], ["END"])
    assert hit == "END" and text == "The " and "".join(out) == "The "
    assert out[1] == ""  # "EN" may start "END": held back


def test_held_back_text_is_released_when_it_is_not_a_stop():
    out, text, hit = run(["a", "EN", "x"], ["END"])
    assert hit is None and text == "aENx" and "".join(out) == "aENx"


def test_incomplete_utf8_is_not_emitted_early():
    out, text, _ = run(["caf", "\ufffd", "é"], [])
    assert out[1] == "" or "\ufffd" not in out[1]


@pytest.mark.parametrize(
    "kw",
    [{"max_new_tokens": 0}, {"temperature": -1}, {"top_p": 0}, {"top_p": 1.5}, {"stop": ("",)}, {"seed": 1.5}],
)
def test_sampling_params_are_validated(kw):
    with pytest.raises(ValueError):
        SamplingParams(**kw)


class CountingTok(ToyTok):
    def __init__(self, pieces):
        super().__init__(pieces)
        self.decoded = 0

    def decode(self, ids, skip_special_tokens=True):
        self.decoded += len(ids)
        return super().decode(ids, skip_special_tokens)


def test_detokenizing_is_linear_in_the_output_length():
    n = 3000
    tok = CountingTok([f"w{i % 7} " for i in range(n)])
    d = Detokenizer(tok, ["STOP"])
    ids, out = [], []
    for i in range(n):
        ids.append(i)
        out.append(d.push(ids)[0])
    out.append(d.flush())
    assert "".join(out) == d.text == "".join(tok.pieces)
    assert tok.decoded <= 4 * n  # re-decoding everything each step would be ~n*n/2 = 4.5M


def test_a_leading_space_dropped_at_the_start_of_a_decode_is_not_lost():
    class SentencePieceLike(ToyTok):  # drops the first token's leading space, as SentencePiece decoders do
        def decode(self, ids, skip_special_tokens=True):
            return super().decode(ids).removeprefix(" ") if ids else ""

    out, text, _ = run(["Hello", " big", " world"], [])
    d = Detokenizer(SentencePieceLike(["Hello", " big", " world"]), [])
    parts = [d.push(list(range(k + 1)))[0] for k in range(3)] + [d.flush()]
    assert "".join(parts) == "Hello big world" == text
