#!/usr/bin/env python3
"""First-use latency probe for a running hearth server (issue 6): how much of a request's time
is the engine meeting a step shape for the first time (GEMM plans, kernel module loads).

    tools/first_use_latency.py [--url http://127.0.0.1:8080] [--lengths 40] [--seed 1]

Sends one /v1/completions request at a time, each a prompt of random token ids of a length not
sent before (--lengths of them, 33 .. --max-len tokens) and max_tokens 1, so a request's wall
time is about its time to first token. Then the same lengths again with fresh ids (every shape
now met, no prefix-cache hits). Prints
the per-pass sum, median and max in ms, and the first pass's excess over the second. Standard
library only, so it runs on the GPU machine as well as here.
"""

import argparse
import json
import random
import statistics
import sys
import time
import urllib.request


def complete(url, model, ids):
    body = {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        json.load(r)
    return (time.perf_counter() - t0) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--lengths", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-len", type=int, default=2000)
    ap.add_argument("--max-id", type=int, default=30000, help="token ids drawn below this")
    args = ap.parse_args()
    with urllib.request.urlopen(args.url + "/v1/models", timeout=60) as r:
        model = json.load(r)["data"][0]["id"]
    rng = random.Random(args.seed)
    lengths = sorted(rng.sample(range(33, args.max_len), args.lengths))
    rng.shuffle(lengths)
    passes = []
    for name in ("first", "again"):
        # Fresh token ids every request of both passes, so no prompt hits the prefix cache.
        prompts = [[rng.randrange(args.max_id // 30, args.max_id) for _ in range(n)] for n in lengths]
        ms = [complete(args.url, model, p) for p in prompts]
        passes.append(ms)
        print(f"{name}: {len(ms)} requests, sum {sum(ms):.1f} ms, median "
              f"{statistics.median(ms):.1f} ms, max {max(ms):.1f} ms")
    excess = sum(passes[0]) - sum(passes[1])
    print(f"first-use excess: {excess:.1f} ms over {len(lengths)} new lengths "
          f"({excess / len(lengths):.2f} ms a request)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
