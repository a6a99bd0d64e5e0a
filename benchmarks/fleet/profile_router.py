"""Where the router's time per request goes: its stages one by one, then cProfile of the whole
request path, in one process (docs/routing.md, "Router overhead").

    PYTHONPATH=src python benchmarks/fleet/profile_router.py [--requests 200] [--tokens 4096] [--top 25]

Stages (process CPU time per request, the bodies of bench_router_overhead.py): JSON, schema and
message conversion, chat template, tokenizer, block keys, routing. Then the router is served in
a process of its own in front of the stub worker, under cProfile (its event loop's thread: the
tokenizer pool's threads are not in it, the stages above time that work), while this process
sends the requests one at a time; SIGINT ends it and writes ``--out``. Prints the stage table and
the router's top functions by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_router_overhead import free_port, prompt, wait  # noqa: E402


def stages(router: Any, bodies: list[bytes]) -> dict[str, float]:
    from ctxcache.integrations.chat import encode_chat
    from ctxcache.server.routes_openai import to_messages
    from ctxcache.server.schemas import ChatCompletionRequest

    rk = router.keys
    out: dict[str, float] = {}

    def timed(name: str, fn: Any, args: list[Any]) -> list[Any]:
        t = time.process_time()
        res = [fn(a) for a in args]
        out[name] = round((time.process_time() - t) / len(args) * 1e3, 4)
        return res

    parsed = timed("json_ms", json.loads, bodies)
    reqs = timed("validate_ms", ChatCompletionRequest.model_validate, parsed)
    msgs = timed("to_messages_ms", to_messages, reqs)
    tok, tpl = rk.tokenizer, rk.template
    plain = [[{"role": m["role"], "content": m["content"]} for m in ms] for ms in msgs]
    texts = timed("template_ms", lambda m: tok.apply_chat_template(m, chat_template=tpl, tokenize=False,
                                                                  add_generation_prompt=True), plain)  # fmt: skip
    timed("tokenizer_call_ms", lambda t: tok(t, add_special_tokens=False).input_ids, texts)
    timed("rust_encode_ms", lambda t: tok._tokenizer.encode(t, add_special_tokens=False).ids, texts)
    ids = timed("encode_chat_ms", lambda m: encode_chat(tok, tpl, m), msgs)
    ns = rk._cache.namespace("default", None)
    timed("keys_ms", lambda i: rk._cache.hasher.keys(i, ns), ids)
    timed("compute_ms", lambda p: rk.compute("openai", p, {}), parsed)
    keyed = [rk.compute("openai", p, {}) for p in parsed]
    timed("route_ms", lambda k: router.route(k, set()), keyed)
    return out


def serve_profiled(port: int, worker: str, out: Path) -> None:
    """The router app under cProfile (its event loop's thread) until SIGINT; stats to ``out``."""
    import uvicorn

    from ctxcache.router.app import create_router_app
    from ctxcache.router.cli import build_router

    server = uvicorn.Server(uvicorn.Config(create_router_app(build_router([worker], None, None, None, None)),
                                           port=port, log_level="warning"))  # fmt: skip
    prof = cProfile.Profile()
    try:
        prof.runcall(server.run)
    except KeyboardInterrupt:  # uvicorn raises the SIGINT again once it has shut down
        pass
    finally:
        prof.dump_stats(str(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--out", type=Path, default=Path("router.pstats"), help="the router's pstats file")
    ap.add_argument("--serve", nargs=2, metavar=("PORT", "WORKER"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        return serve_profiled(int(args.serve[0]), args.serve[1], args.out)
    from ctxcache.router.cli import build_router

    wport, rport = free_port(), free_port()
    stub = subprocess.Popen([sys.executable, str(HERE / "stub_worker.py"), str(wport)])
    worker = f"http://127.0.0.1:{wport}"
    router_proc = None
    try:
        wait(worker, stub)
        router = build_router([worker], None, None, None, None)
        words = args.tokens // 6
        bodies = [json.dumps(prompt(i, words)).encode() for i in range(args.requests)]
        print(json.dumps({"stages": stages(router, bodies), "loadavg": round(os.getloadavg()[0], 2)}))
        router.keys.close()  # type: ignore[union-attr]
        cmd = [sys.executable, __file__, "--out", str(args.out), "--serve", str(rport), worker]
        router_proc = subprocess.Popen(cmd)
        url = f"http://127.0.0.1:{rport}"
        wait(url, router_proc)
        done = []
        with httpx.Client(timeout=60) as c:
            for b in bodies:
                t0 = time.perf_counter()
                c.post(
                    f"{url}/v1/chat/completions", content=b, headers={"content-type": "application/json"}
                ).raise_for_status()
                done.append(time.perf_counter() - t0)
        router_proc.send_signal(signal.SIGINT)
        router_proc.wait(timeout=60)
        done.sort()
        print(json.dumps({"routed_ms_p50": round(done[len(done) // 2] * 1e3, 3), "requests": len(done),
                          "loadavg": round(os.getloadavg()[0], 2)}))  # fmt: skip
        pstats.Stats(str(args.out)).sort_stats("tottime").print_stats(args.top)
    finally:
        for p in (router_proc, stub):
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait(timeout=30)


if __name__ == "__main__":
    main()
