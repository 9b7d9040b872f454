#!/usr/bin/env python3
"""Batch-invariance probe for a running hearth server (issue 6): the same requests run one at
a time, then all at once, must produce the same tokens.

    tools/batch_invariance_probe.py [--url http://127.0.0.1:8080] [--requests 12]
        [--max-tokens 100] [--temperature 0] [--seed S] [--dump FILE]

Each request is a /v1/completions call with ignore_eos, a distinct prompt of distinct length,
greedy (temperature 0) or seeded sampling. Prints one line a request (identical, or the first
differing character) and a summary line; exits 1 when any request differs. Standard library
only, so it runs on the GPU machine as well as here. --dump writes the lone runs' texts as
JSON, to compare two servers (e.g. a lever on and off) with cmp.
"""

import argparse
import concurrent.futures
import json
import sys
import urllib.request

WORDS = ("river stone lantern orchard signal copper meadow harbor winter candle "
         "thunder garden mirror compass velvet").split()


def prompt(i):
    # Distinct lengths (3 .. 3 + 5 i words) so the batch mixes prefill and decode rows.
    return " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(3 + 5 * i))


def complete(url, model, i, args):
    body = {
        "model": model,
        "prompt": prompt(i),
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "ignore_eos": True,
    }
    if args.seed is not None:
        body["seed"] = args.seed + i
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.load(r)
    return out["choices"][0]["text"], out["usage"]["completion_tokens"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--max-tokens", type=int, default=100)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--dump", default=None)
    args = ap.parse_args()
    with urllib.request.urlopen(args.url + "/v1/models", timeout=60) as r:
        model = json.load(r)["data"][0]["id"]
    alone = [complete(args.url, model, i, args) for i in range(args.requests)]
    if args.dump:
        with open(args.dump, "w") as f:
            json.dump([text for text, _ in alone], f)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.requests) as pool:
        together = list(pool.map(lambda i: complete(args.url, model, i, args),
                                 range(args.requests)))
    same = 0
    for i, ((a, na), (b, nb)) in enumerate(zip(alone, together)):
        if a == b:
            same += 1
            print(f"request {i:2d}: identical ({na} tokens)")
        else:
            at = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            print(f"request {i:2d}: differs at character {at} of {len(a)} "
                  f"({na} vs {nb} tokens)")
    print(f"batch invariance: {same} of {args.requests} identical "
          f"(temperature {args.temperature}, seed {args.seed})")
    return 0 if same == args.requests else 1


if __name__ == "__main__":
    sys.exit(main())
