"""A worker that answers at once (no model): what the router's overhead is measured against.

python benchmarks/fleet/stub_worker.py PORT
"""

from __future__ import annotations

import sys

import uvicorn
from fastapi import FastAPI, Request

app = FastAPI()
REPLY = {
    "id": "chatcmpl-stub", "object": "chat.completion", "created": 0, "model": "stub",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2, "prompt_tokens_details": {"cached_tokens": 0}},
}  # fmt: skip


@app.get("/readyz")
async def ready() -> dict[str, bool]:
    return {"ready": True}


@app.post("/v1/chat/completions")
async def chat(request: Request) -> dict[str, object]:
    await request.body()
    return REPLY


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
