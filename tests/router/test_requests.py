"""The router's block keys equal the worker's for the same request: the real tokenizer and chat
template (loaded separately, as `ctxcache route` does), special-token text, both APIs, tenants,
their salts and a per-request cache_salt."""

from __future__ import annotations

import pytest

from ctxcache import ContextCache
from ctxcache.integrations.chat import chat_template_for, model_type
from ctxcache.integrations.model_store import fingerprint, resolve_model
from ctxcache.router.requests import RequestKeys
from ctxcache.server.config import ServerConfig
from ctxcache.server.routes_anthropic import to_messages as anthropic_messages
from ctxcache.server.routes_openai import to_messages as openai_messages
from ctxcache.server.schemas import ChatCompletionRequest, MessagesRequest

from ..integrations.model_fixture import _load, text

CACHE = {
    "block_size": 16,
    "salt": "fleet-1",
    "tenancy": {"secret": "server-secret"},
    "tenants": {"team-a": {"api_keys": ["sk-a"], "salt": "a-salt"}, "team-b": {"api_keys": ["sk-b"]}},
}
SPECIAL = "Quote this: <start_of_turn>user\n<bos><end_of_turn> and <pad> literally."


@pytest.fixture(scope="module")
def sides():
    from ctxcache.integrations.transformers import CachedLM

    path = resolve_model(None, quiet=True)
    cfg = ServerConfig(cache_config=dict(CACHE))
    model, tok = _load()
    cache = ContextCache.from_config(cfg.cache_dict(fingerprint(path)))  # what `serve` builds
    worker = CachedLM(model, tok, cache, chat_template=chat_template_for(tok, model_type(path)))
    router = RequestKeys.from_model_dir(path, cfg)  # its own tokenizer, as `ctxcache route` loads it
    yield worker, router
    router.close()
    cache.close()


def worker_keys(worker, msgs, tenant, salt=None):
    ids = worker.encode(msgs)
    return worker.cache.prompt(ids, worker.cache.namespace(tenant, salt)).keys()


OPENAI = [
    {"model": "m", "messages": [{"role": "system", "content": text(4)}, {"role": "user", "content": SPECIAL}]},
    {"model": "m", "messages": [{"role": "developer", "content": text(3)},
                                {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": SPECIAL}]},
                                {"role": "assistant", "content": "  padded reply  "}, {"role": "user", "content": "more"}]},
    {"model": "m", "cache_salt": "req-salt", "messages": [{"role": "user", "content": text(5)}]},
]  # fmt: skip
ANTHROPIC = [
    {"model": "m", "max_tokens": 5, "system": text(4), "messages": [{"role": "user", "content": SPECIAL}]},
    {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": text(3)}],
     "system": [{"type": "text", "text": text(2), "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": SPECIAL}]},
]  # fmt: skip


@pytest.mark.parametrize("body", OPENAI)
@pytest.mark.parametrize("key,tenant", [("sk-a", "team-a"), ("sk-b", "team-b")])
def test_openai_requests_get_the_workers_keys(sides, body, key, tenant):
    worker, router = sides
    got = router.compute("openai", body, {"authorization": f"Bearer {key}"})
    req = ChatCompletionRequest.model_validate(body)
    want = worker_keys(worker, openai_messages(req), tenant, req.cache_salt)
    assert got is not None and got.tenant == tenant and len(want) >= 3
    assert got.keys == want and got.tokens == len(worker.encode(openai_messages(req)))


@pytest.mark.parametrize("body", ANTHROPIC)
def test_anthropic_requests_get_the_workers_keys(sides, body):
    worker, router = sides
    got = router.compute("anthropic", body, {"x-api-key": "sk-a"})
    msgs, _ = anthropic_messages(MessagesRequest.model_validate(body))
    assert got is not None and got.keys == worker_keys(worker, msgs, "team-a") and len(got.keys) >= 3


def test_special_token_text_is_tokenized_as_the_worker_does(sides):
    worker, router = sides
    body = OPENAI[0]
    ids = worker.encode(openai_messages(ChatCompletionRequest.model_validate(body)))
    bos = worker.tokenizer.convert_tokens_to_ids("<bos>")
    assert ids.count(bos) >= 1  # the template's BOS, and the literal text's, as the tokenizer reads it
    assert router.compute("openai", body, {"x-api-key": "sk-a"}).tokens == len(ids)


def test_tenants_and_salts_never_share_keys_and_bad_requests_get_none(sides):
    _, router = sides
    body = {"model": "m", "messages": [{"role": "user", "content": text(4)}]}
    a = router.compute("openai", body, {"x-api-key": "sk-a"}).keys
    b = router.compute("openai", body, {"x-api-key": "sk-b"}).keys
    salted = router.compute("openai", {**body, "cache_salt": "s1"}, {"x-api-key": "sk-a"}).keys
    assert not set(a) & set(b) and not set(a) & set(salted)
    assert router.compute("openai", body, {"x-api-key": "sk-unknown"}) is None
    assert router.compute("openai", body, {}) is None
    assert router.compute("openai", {**body, "cache_salt": "bad salt!"}, {"x-api-key": "sk-a"}) is None
    assert router.compute("anthropic", {"model": "m", "messages": []}, {"x-api-key": "sk-a"}) is None
    assert router.compute("openai", ["not", "a", "dict"], {"x-api-key": "sk-a"}) is None


TRICKY = [
    "",
    " leading and trailing  ",
    "tabs\tand\nnewlines\n\n  indented code:\n    x = 1\n",
    "literal \u2581 lower blocks\u2581\u2581 and >\u2581</ html-ish > </b>",
    "emoji 🙂🚀, CJK 漢字かな, Arabic مرحبا, combining e\u0301, NUL-ish \x01\x7f",
    "<start_of_turn>user\nnested<end_of_turn> <bos> <pad><unk>" * 3,
    " ".join(f"w{i}" for i in range(3000)),
]


@pytest.mark.parametrize("sample", TRICKY)
def test_the_routers_text_encoder_gives_the_tokenizer_calls_ids(sides, sample):
    worker, router = sides
    want = list(worker.tokenizer(sample, add_special_tokens=False).input_ids)
    assert list(router._encode(sample)) == want


def test_the_router_tokenizes_through_the_backend_not_the_transformers_call(sides, monkeypatch):
    worker, router = sides
    body = OPENAI[0]
    want = router.compute("openai", body, {"x-api-key": "sk-a"})

    def refuse(*a, **kw):
        raise AssertionError("the transformers call ran")

    monkeypatch.setattr(type(router.tokenizer), "__call__", refuse)
    assert router.compute("openai", body, {"x-api-key": "sk-a"}) == want


def test_a_conversations_earlier_turns_come_from_the_piece_cache_with_the_workers_keys(sides):
    worker, router = sides
    cache = router._encode
    assert cache.cut == "<end_of_turn>"  # found from the chat template, and the probe agreed
    cache.clear()
    msgs = [{"role": "system", "content": text(3)}]
    turns = [(text(2), "a reply"), (SPECIAL, " spaced\n\n"), (TRICKY[4], "ok"), ("end", "")]
    for turn, (user, reply) in enumerate(turns):
        msgs.append({"role": "user", "content": user})
        body = {"model": "m", "messages": list(msgs)}
        before = cache.misses
        got = router.compute("openai", body, {"x-api-key": "sk-a"})
        want = worker_keys(worker, openai_messages(ChatCompletionRequest.model_validate(body)), "team-a")
        assert got is not None and got.keys == want
        if turn:  # the earlier turns were cached: only the new user turn and the generation prompt
            assert cache.misses - before <= 2 + SPECIAL.count("<end_of_turn>")
        msgs.append({"role": "assistant", "content": reply})


def test_the_piece_cache_keeps_at_most_its_capacity_in_tokens():
    from ctxcache.router.pieces import PieceCache

    calls = []

    def encode(texts):
        calls.append(texts)
        return [[ord(ch) for ch in t] for t in texts]  # one id per character: "|" is 124

    c = PieceCache(encode, "|", ord("|"), capacity_tokens=6)
    assert c("ab|cd|e").tolist() == [97, 98, 124, 99, 100, 124, 101] and calls == [["ab|cd|e"]]  # one text
    assert c.tokens == 4 and list(c._lru) == ["cd|", "e"]  # "ab|" went first: 7 tokens > 6
    assert c("xy|cd|zw").tolist() == [120, 121, 124, 99, 100, 124, 122, 119] and calls[-1] == ["xy|", "zw"]
    assert list(c._lru) == ["xy|", "zw"] and c.tokens == 5  # each run of misses one text; LRU out
    assert c("0123456|").tolist() == [*range(48, 55), 124] and c.tokens == 5  # longer than the cache: not kept
    wrong = PieceCache(encode, "|", 999)  # a cut id the encoder never gives: each piece on its own
    assert wrong("ab|cd").tolist() == [97, 98, 124, 99, 100] and calls[-1] == ["ab|", "cd"]


def test_the_piece_cache_can_be_turned_off_and_the_help_says_what_it_costs():
    from typer.testing import CliRunner

    from ctxcache.cli import app
    from ctxcache.router.pieces import PieceCache

    r = CliRunner().invoke(app, ["route", "--help"], env={"COLUMNS": "250"})
    assert r.exit_code == 0 and "--piece-cache-tokens" in r.output and "0: off" in r.output
    path = resolve_model(None, quiet=True)
    assert isinstance(RequestKeys.from_model_dir(path, ServerConfig())._encode, PieceCache)
    assert not isinstance(RequestKeys.from_model_dir(path, ServerConfig(), piece_cache_tokens=0)._encode, PieceCache)
