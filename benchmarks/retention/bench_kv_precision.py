"""Mixed-precision KV blocks on Gemma 3 270M: raw / fp16 / k16v8 / int8, stored, reloaded, used.

Every mode goes through the real block codec (``ctxcache.codec.Codec``), block by block, exactly
as a warm/disk/Redis tier stores it; the reloaded K/V then carry the continuation.

- Perplexity: per text, a ``--ctx``-token context is prefilled in fp32, its blocks encoded and
  decoded in each mode, and the next ``--eval`` tokens scored on top; Δ vs the fp32 (raw) KV.
- Greedy agreement: ``--n`` prompts of ``--prompt`` tokens cut from the same texts; fp32 greedy
  decodes ``--new`` tokens; each mode's output is identical iff, teacher-forced on the fp32
  output, its argmax matches at every step (so one forward per mode, no decode loop).
- Bytes per token (encoded blob / tokens) and decode (load) speed, interleaved across modes.

  python benchmarks/retention/bench_kv_precision.py [--n 200]
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import numpy as np
from retention_common import RESULTS, load_model, progress, texts, write

MODES = ("raw", "fp16", "k16v8", "int8")


def _roundtrip(codec: Any, layers: list[tuple[Any, Any]], bs: int) -> tuple[list[tuple[Any, Any]], int, float]:
    """Encode the KV block by block, decode it back: (layers, encoded bytes, decode seconds)."""
    import torch

    n = layers[0][0].shape[-2]
    parts: list[list[tuple[Any, Any]]] = []
    nbytes, t_dec = 0, 0.0
    for b in range(0, n, bs):
        payload = [(k[:, :, b : b + bs].contiguous(), v[:, :, b : b + bs].contiguous()) for k, v in layers]
        blob = codec.encode(payload, key=b.to_bytes(16, "little"))
        nbytes += len(blob)
        t0 = time.perf_counter()
        block = codec.decode(blob)
        t_dec += time.perf_counter() - t0
        parts.append([(torch.from_numpy(np.array(k)), torch.from_numpy(np.array(v))) for k, v in block.payload])
    out = [
        (torch.cat([p[i][0] for p in parts], -2), torch.cat([p[i][1] for p in parts], -2)) for i in range(len(layers))
    ]
    return out, nbytes, t_dec


def _cache(layers: list[tuple[Any, Any]]) -> Any:
    from transformers import DynamicCache

    kv = DynamicCache()
    for i, (k, v) in enumerate(layers):
        kv.update(k, v, i)
    return kv


def _nll(model: Any, layers: list[tuple[Any, Any]], first_logits: Any, ids: list[int], start: int, step: int) -> float:
    import torch

    kv, prev, total = _cache(layers), first_logits, 0.0
    for s in range(0, len(ids), step):
        piece = ids[s : s + step]
        pos = torch.arange(start + s, start + s + len(piece))[None]
        lg = model(input_ids=torch.tensor([piece]), cache=kv, position_ids=pos, use_cache=True,
                   logits_to_keep=len(piece)).logits[0]  # fmt: skip
        pred = torch.cat([prev[None], lg[:-1]]).to(torch.float64)
        total -= float(torch.log_softmax(pred, -1)[torch.arange(len(piece)), torch.tensor(piece)].sum())
        prev = lg[-1]
    return total


def run_ppl(model: Any, tok: Any, a: argparse.Namespace, bar: Any, speed: dict[str, float]) -> list[dict[str, Any]]:
    import torch

    from ctxcache.codec import Codec

    rows = []
    corpus = list(texts().items())[: a.texts]
    task = bar.add_task("perplexity per mode", total=len(corpus) * len(MODES))
    for name, text in corpus:
        ids = tok(text).input_ids[: a.ctx + a.eval]
        kv = _cache([])
        out = model(input_ids=torch.tensor([ids[: a.ctx]]), cache=kv, use_cache=True, logits_to_keep=1)
        layers = [(layer.keys, layer.values) for layer in kv.layers]
        if not speed:
            speed.update(load_speed(layers, a.block))
        for mode in MODES:
            got, nbytes, t_dec = _roundtrip(Codec(mode), layers, a.block)
            total = _nll(model, got, out.logits[0, -1], ids[a.ctx :], a.ctx, a.step)
            n = len(ids) - a.ctx
            rows.append({"text": name, "mode": mode, "ppl": math.exp(total / n), "nll_sum": total, "n": n,
                         "bytes_per_token": nbytes / a.ctx, "decode_s": t_dec})  # fmt: skip
            bar.advance(task)
    return rows


def load_speed(layers: list[tuple[Any, Any]], block: int, rounds: int = 5) -> dict[str, float]:
    """Decode (reload) throughput per mode, tokens/s: modes interleaved within each round, median of rounds."""
    from ctxcache.codec import Codec

    n = layers[0][0].shape[-2]
    times: dict[str, list[float]] = {m: [] for m in MODES}
    for _ in range(rounds):
        for mode in MODES:
            times[mode].append(_roundtrip(Codec(mode), layers, block)[2])
    return {m: n / float(np.median(t)) for m, t in times.items()}


def _prompts(tok: Any, n: int, length: int) -> list[list[int]]:
    pools = [tok(t, add_special_tokens=False).input_ids for t in texts().values()]
    out, i = [], 0
    while len(out) < n:
        pool = pools[i % len(pools)]
        k = i // len(pools)
        off = (k * 97 * length // 64) % max(1, len(pool) - length)
        out.append([tok.bos_token_id, *pool[off : off + length - 1]])
        i += 1
    return out


def run_agreement(model: Any, tok: Any, a: argparse.Namespace, bar: Any) -> dict[str, Any]:
    import torch

    from ctxcache.codec import Codec

    prompts = _prompts(tok, a.n, a.prompt)
    same = dict.fromkeys(MODES, 0)
    agree_tokens = dict.fromkeys(MODES, 0)
    task = bar.add_task("greedy agreement", total=len(prompts))
    for b in range(0, len(prompts), a.batch):
        batch = torch.tensor(prompts[b : b + a.batch])
        kv = _cache([])
        lg = model(input_ids=batch, cache=kv, use_cache=True, logits_to_keep=1).logits[:, -1]
        layers = [(layer.keys.clone(), layer.values.clone()) for layer in kv.layers]
        first = lg.argmax(-1)
        ref = [first]
        pos = a.prompt
        for _ in range(a.new - 1):  # fp32 greedy, batched
            lg = model(input_ids=ref[-1][:, None], cache=kv, position_ids=torch.full((len(batch), 1), pos),
                       use_cache=True, logits_to_keep=1).logits[:, -1]  # fmt: skip
            ref.append(lg.argmax(-1))
            pos += 1
        ref_t = torch.stack(ref, 1)  # [B, new]
        for mode in MODES:
            got, _, _ = _roundtrip(Codec(mode), layers, a.block)
            kv2 = _cache([(k[:, :, : a.prompt - 1], v[:, :, : a.prompt - 1]) for k, v in got])
            p2 = torch.arange(a.prompt - 1, a.prompt + a.new - 1)[None].expand(len(batch), -1)
            inp = torch.cat([batch[:, -1:], ref_t[:, :-1]], 1)
            # The prompt's last token is re-run on the reloaded blocks (as CachedLM does): its logits start the decode.
            pred = model(input_ids=inp, cache=kv2, position_ids=p2, use_cache=True,
                         logits_to_keep=a.new).logits.argmax(-1)  # fmt: skip
            match = pred == ref_t
            same[mode] += int(match.all(1).sum())
            first_miss = torch.where(match.all(1), a.new, (~match).int().argmax(1))
            agree_tokens[mode] += int(first_miss.sum())
        bar.advance(task, len(batch))
    n = len(prompts)
    return {"n": n, "new_tokens": a.new, "prompt_tokens": a.prompt,
            "identical_outputs": {m: same[m] / n for m in MODES},
            "mean_tokens_before_divergence": {m: agree_tokens[m] / n for m in MODES}}  # fmt: skip


def _plot(res: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res["ppl"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for name in sorted({r["text"] for r in rows}):
        base = next(r["ppl"] for r in rows if r["text"] == name and r["mode"] == "raw")
        pts = [(r["bytes_per_token"], 100 * (r["ppl"] / base - 1)) for r in rows if r["text"] == name]
        a1.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=name)
        for (x, y), m in zip(pts, MODES):
            a1.annotate(m, (x, y), fontsize=7)
    a1.set_xlabel("stored bytes per token")
    a1.set_ylabel("Δ perplexity vs fp32 (%)")
    a1.legend(fontsize=7)
    ag = res["agreement"]["identical_outputs"]
    a2.bar(list(ag), [ag[m] for m in ag])
    a2.set_ylim(0, 1.05)
    a2.set_title(f"identical greedy outputs ({res['agreement']['n']} prompts, {res['agreement']['new_tokens']} tokens)")
    fig.tight_layout()
    fig.savefig(RESULTS / "kv_precision.png", dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--eval", type=int, default=256)
    ap.add_argument("--step", type=int, default=128)
    ap.add_argument("--texts", type=int, default=3)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--batch", type=int, default=20)
    a = ap.parse_args()
    import torch

    model, tok = load_model("sdpa")
    t0 = time.perf_counter()
    with torch.no_grad(), progress() as bar:
        speed: dict[str, float] = {}
        res: dict[str, Any] = {"ppl": run_ppl(model, tok, a, bar, speed)}
        res["load_tokens_per_s"] = speed
        res["agreement"] = run_agreement(model, tok, a, bar)
    _plot(res)
    res.update({"args": vars(a), "wall_s": time.perf_counter() - t0})
    write("kv_precision", res)


if __name__ == "__main__":
    main()
