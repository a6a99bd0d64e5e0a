"""The tokenizer cache: a second load reads the pickle and encodes exactly as a fresh load; a
changed tokenizer file, a pickle others may write, or a damaged one is never read."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from transformers import AutoTokenizer, PreTrainedTokenizerFast  # noqa: E402

from ctxcache.integrations import tokenizer_cache  # noqa: E402
from ctxcache.integrations.tokenizer_cache import cache_path, load_tokenizer  # noqa: E402

_REFERENCE = AutoTokenizer.from_pretrained  # unpatched: the tests' own fresh loads are not counted
TEXTS = ["hello world", "the mill by the river", "<bos>hello <eos> world", "unknownword river"]


@pytest.fixture
def tok_dir(tmp_path: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["<unk>", "<bos>", "<eos>", "hello", "world", "the", "mill", "by", "river"]
    t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=t, unk_token="<unk>", bos_token="<bos>", eos_token="<eos>")
    fast.chat_template = "{% for m in messages %}<bos>{{ m['content'] }}<eos>{% endfor %}"
    fast.save_pretrained(tmp_path)
    return tmp_path


@pytest.fixture
def fresh_loads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every ordinary (slow) load, recorded."""
    calls: list[Path] = []
    real = AutoTokenizer.from_pretrained

    def counted(path, *a, **kw):
        calls.append(Path(path))
        return real(path, *a, **kw)

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", counted)
    return calls


def encodings(tok) -> list:
    chat = tok.apply_chat_template([{"role": "user", "content": "hello river"}], tokenize=True)
    return [tok(t).input_ids for t in TEXTS] + [list(chat), tok.bos_token_id, tok.eos_token_id, len(tok)]


def test_the_second_load_reads_the_pickle_and_encodes_the_same(tok_dir, fresh_loads):
    first = load_tokenizer(tok_dir)
    assert cache_path(tok_dir).is_file() and len(fresh_loads) == 1
    second = load_tokenizer(tok_dir)
    assert len(fresh_loads) == 1, "the second load parsed the tokenizer files again"
    assert encodings(second) == encodings(first) == encodings(_REFERENCE(tok_dir))


def test_a_changed_tokenizer_file_is_a_new_cache_never_the_old_pickle(tok_dir, fresh_loads):
    load_tokenizer(tok_dir)
    old = cache_path(tok_dir)
    cfg = tok_dir / "tokenizer_config.json"
    cfg.write_text(cfg.read_text().replace('"<unk>"', '"<unk>" ', 1))
    os.utime(cfg, ns=(1, 1))
    assert cache_path(tok_dir) != old
    load_tokenizer(tok_dir)
    assert len(fresh_loads) == 2


def test_a_pickle_others_may_write_is_not_read(tok_dir, fresh_loads):
    load_tokenizer(tok_dir)
    cache_path(tok_dir).chmod(0o666)
    tok = load_tokenizer(tok_dir)
    assert len(fresh_loads) == 2 and encodings(tok) == encodings(_REFERENCE(tok_dir))


def test_a_damaged_pickle_falls_back_and_is_rewritten(tok_dir, fresh_loads, caplog):
    load_tokenizer(tok_dir)
    f = cache_path(tok_dir)
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with caplog.at_level(logging.WARNING, logger=tokenizer_cache.__name__):
        tok = load_tokenizer(tok_dir)
    assert len(fresh_loads) == 2 and "unreadable" in caplog.text
    assert encodings(tok) == encodings(_REFERENCE(tok_dir))
    load_tokenizer(tok_dir)
    assert len(fresh_loads) == 2, "the damaged pickle was not replaced"


def test_a_read_only_directory_loads_without_a_cache(tok_dir, fresh_loads, monkeypatch):
    def refuse(*a, **kw):  # what a read-only mount answers (root ignores a directory's mode bits)
        raise PermissionError(30, "Read-only file system")

    monkeypatch.setattr(tokenizer_cache.tempfile, "mkstemp", refuse)
    assert encodings(load_tokenizer(tok_dir)) == encodings(_REFERENCE(tok_dir))
    assert not cache_path(tok_dir).exists() and not list(tok_dir.glob("*.tmp"))


def test_off_switch(tok_dir, fresh_loads, monkeypatch):
    monkeypatch.setenv("CTXCACHE_TOKENIZER_CACHE", "0")
    load_tokenizer(tok_dir)
    load_tokenizer(tok_dir)
    assert len(fresh_loads) == 2 and not cache_path(tok_dir).exists()


def test_the_real_models_cached_tokenizer_equals_a_fresh_one():
    from ctxcache.integrations.model_store import drop_python_vocab, resolve_model

    path = resolve_model(None, quiet=True)
    load_tokenizer(path)  # writes the pickle if this run has none yet
    cached = load_tokenizer(path)
    fresh = drop_python_vocab(_REFERENCE(path))
    assert type(cached) is type(fresh)
    text = "The mill by the river <start_of_turn>user\nhello<end_of_turn> 1234 naïve ☃ "
    assert cached(text).input_ids == fresh(text).input_ids
    assert cached.decode(fresh(text).input_ids) == fresh.decode(fresh(text).input_ids)
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert cached.apply_chat_template(msgs, tokenize=True) == fresh.apply_chat_template(msgs, tokenize=True)
    assert (cached.bos_token_id, cached.eos_token_id, len(cached)) == (
        fresh.bos_token_id,
        fresh.eos_token_id,
        len(fresh),
    )
