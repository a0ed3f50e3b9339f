#!/usr/bin/env python3
"""The cost of an uncontended acquire + release cycle from Python: the dlm
client on one session, beside the usual Redis lock with redis-py
(``SET key value NX PX 10000``, released by a Lua script that deletes the
key only if it still holds the value).

    pip install redis          # redis-py: for the comparison only, never a dependency of dlm
    python3 clients/python/bench/cycle.py --dlm http://127.0.0.1:7421 --redis redis://127.0.0.1:6379 --n 2000

Both loops run N cycles after a warm-up, one at a time, on one connection
(pool) each, and print a markdown table of the median and mean cycle and
their ratio. Leave --redis out to measure dlm alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import dlm  # noqa: E402

RELEASE = "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end"


def measure(cycle: Callable[[], None], n: int, warmup: int) -> list[float]:
    """Runs ``cycle`` warmup + n times; returns the n durations in µs."""
    for _ in range(warmup):
        cycle()
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        cycle()
        out.append((time.perf_counter_ns() - t0) / 1000)
    return out


def bench_dlm(url: str, n: int, warmup: int) -> list[float]:
    name = f"bench/cycle/{uuid.uuid4().hex[:8]}"
    with dlm.Client(url, label="bench cycle") as client, client.session(ttl=30) as s:

        def cycle() -> None:
            s.acquire(name, wait=0).release()

        return measure(cycle, n, warmup)


def bench_redis(url: str, n: int, warmup: int) -> list[float]:
    try:
        import redis  # type: ignore[import-not-found]
    except ImportError:
        redis = None
    if redis is None or not hasattr(redis, "Redis"):
        sys.exit(
            "cycle.py: redis-py is not installed here: pip install redis "
            "(a module named redis without redis.Redis is not it)"
        )
    r = redis.Redis.from_url(url)
    release = r.register_script(RELEASE)
    key = f"bench:cycle:{uuid.uuid4().hex[:8]}"

    def cycle() -> None:
        token = uuid.uuid4().hex
        if not r.set(key, token, nx=True, px=10000):
            raise RuntimeError("redis lock busy: is something else using the key?")
        release(keys=[key], args=[token])

    try:
        return measure(cycle, n, warmup)
    finally:
        r.close()


def row(name: str, xs: list[float]) -> str:
    return f"| {name} | {statistics.median(xs):.0f} | {statistics.fmean(xs):.0f} |"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dlm", required=True, help="the dlm server's HTTP URL, such as http://127.0.0.1:7421")
    p.add_argument("--redis", help="a Redis URL, such as redis://127.0.0.1:6379 (needs redis-py)")
    p.add_argument("--n", type=int, default=2000, help="cycles measured (default 2000)")
    p.add_argument("--warmup", type=int, default=200, help="cycles run first, not measured (default 200)")
    p.add_argument("--label", default="dlm", help="the name of the dlm row (such as: dlm, in memory)")
    p.add_argument("--json", action="store_true", help="print one JSON object of the figures (µs) instead of the table")
    a = p.parse_args(argv)

    d = bench_dlm(a.dlm, a.n, a.warmup)
    if a.json:
        out = {"dlm_p50_us": statistics.median(d), "dlm_mean_us": statistics.fmean(d)}
        if a.redis:
            r = bench_redis(a.redis, a.n, a.warmup)
            out.update(redis_p50_us=statistics.median(r), redis_mean_us=statistics.fmean(r))
        print(json.dumps(out))
        return
    print(f"{a.n} uncontended acquire + release cycles after {a.warmup} of warm-up, one at a time (µs)\n")
    print("| client | p50 | mean |")
    print("|---|---:|---:|")
    print(row(f"{a.label} (dlm-client, Acquire + Release over HTTP/JSON)", d))
    if a.redis:
        r = bench_redis(a.redis, a.n, a.warmup)
        print(row("Redis (redis-py, SET NX PX + Lua release)", r))
        print(
            f"\ndlm / Redis: {statistics.median(d) / statistics.median(r):.2f}x at p50, "
            f"{statistics.fmean(d) / statistics.fmean(r):.2f}x in the mean"
        )


if __name__ == "__main__":
    main()
