"""Turns one bench/run output directory into the Markdown tables of BENCHMARKS.md.

Each figure is the median over the rounds of that scenario and server; the ratio columns divide
hookonce's median by the other server's median. Nothing is estimated: a missing file is a
missing row.
"""
import csv
import glob
import json
import os
import statistics
import sys

out = sys.argv[1]
rates = sys.argv[2:]


def runs(scenario, server):
    found = []
    for path in sorted(glob.glob(os.path.join(out, f"{scenario}-{server}-*.json"))):
        with open(path) as f:
            found.append(json.load(f))
    return found


def runs_by_path(path):
    with open(path) as f:
        return json.load(f)


def median(values):
    return statistics.median(values) if values else float("nan")


def row(scenario, server):
    r = runs(scenario, server)
    if not r:
        return None
    cpu = []
    for path in sorted(glob.glob(os.path.join(out, f"{scenario}-{server}-*.cpu"))):
        with open(path) as f:
            c = json.load(f)
        requests = runs_by_path(path.replace(".cpu", ".json"))["requests"]
        cpu.append(c["ticks"] / c["hz"] * 1e6 / max(requests, 1))
    ok = [sum(n for s, n in x["statuses"].items() if s.startswith("2")) / x["requests"] for x in r]
    return {
        "rps": median([x["requests_per_second"] for x in r]),
        "eps": median([x["events_per_second"] for x in r]),
        "p50": median([x["latency_us"]["p50"] for x in r]) / 1000,
        "p90": median([x["latency_us"]["p90"] for x in r]) / 1000,
        "p99": median([x["latency_us"]["p99"] for x in r]) / 1000,
        "p999": median([x["latency_us"]["p999"] for x in r]) / 1000,
        "max": median([x["latency_us"]["max"] for x in r]) / 1000,
        "ok": min(ok),
        "cpu": median(cpu),
        "s50": median([x["service_us"]["p50"] for x in r if "service_us" in x]) / 1000,
        "s99": median([x["service_us"]["p99"] for x in r if "service_us" in x]) / 1000,
        "rounds": len(r),
        "all_rps": [round(x["requests_per_second"]) for x in r],
    }


scenarios = [
    ("unique", "GitHub scheme, all events unique", ["hookonce", "baseline", "baseline+jemalloc", "webhook"]),
] + [
    (f"rate{r}", f"GitHub scheme, unique, open loop at {r} requests/s", ["hookonce", "baseline", "baseline+jemalloc", "webhook"])
    for r in rates
] + [
    ("dup10", "GitHub scheme, ~10% duplicate deliveries", ["hookonce", "baseline", "baseline+jemalloc"]),
    ("stripe", "Stripe scheme, all events unique", ["hookonce", "baseline", "baseline+jemalloc"]),
    ("adyen5", "Adyen batches of 5 items (events/s = 5 × requests/s)", ["hookonce", "baseline", "baseline+jemalloc"]),
]
print("| scenario | server | requests/s | events/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | service p50 / p99 ms | server CPU µs/request | 2xx | rounds (requests/s) |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
ratios = []
for key, title, servers in scenarios:
    rows = {s: row(key, s) for s in servers}
    for server in servers:
        r = rows[server]
        if r is None:
            continue
        print(f"| {title} | {server} | {r['rps']:.0f} | {r['eps']:.0f} | {r['p50']:.2f} | {r['p90']:.2f} | "
              f"{r['p99']:.2f} | {r['p999']:.2f} | {r['max']:.2f} | {r['s50']:.2f} / {r['s99']:.2f} | {r['cpu']:.0f} | {r['ok']:.1%} | {r['all_rps']} |")
    hk = rows.get("hookonce")
    if key.startswith("rate"):
        continue  # same offered load for everyone: compare the latency columns instead
    for other in servers[1:]:
        if hk and rows.get(other):
            ratios.append((title, other, hk["rps"] / rows[other]["rps"]))

print()
print("| scenario | hookonce ÷ | throughput ratio |")
print("|---|---|---:|")
for title, other, ratio in ratios:
    print(f"| {title} | {other} | {ratio:.2f}× |")

bench = []
for path in sorted(glob.glob(os.path.join(out, "redis-benchmark-*.csv"))):
    with open(path) as f:
        rows = [r for r in csv.reader(f) if r and r[0] != "test"]
    if rows:
        bench.append(rows[-1])
if bench:
    rps = median([float(r[1]) for r in bench])
    p50 = median([float(r[4]) for r in bench])
    p99 = median([float(r[6]) for r in bench])
    print()
    print(f"redis-benchmark, the same script by EVALSHA, 50 clients, 1.5 KB body: "
          f"{rps:.0f} calls/s (median of {len(bench)}; {[round(float(r[1])) for r in bench]}), "
          f"p50 {p50:.3f} ms, p99 {p99:.3f} ms")
    for key, title, _ in scenarios:
        if key.startswith("rate"):
            continue
        hk = row(key, "hookonce")
        if hk:
            print(f"- {title}: hookonce forwards {hk['eps']:.0f} events/s = {hk['eps'] / rps:.2f}× of Redis's script ceiling")

memory = {}
for name in ("idle", "peak", "redis-memory"):
    path = os.path.join(out, f"{name}.json")
    if os.path.exists(path):
        with open(path) as f:
            memory.update(json.load(f))
if memory:
    print()
    print("| memory | value |")
    print("|---|---:|")
    for key in ("hookonce_idle_rss_kib", "hookonce_peak_rss_kib", "hookonce_after_rss_kib",
                "baseline_jemalloc_idle_rss_kib", "baseline_jemalloc_peak_rss_kib",
                "baseline_idle_rss_kib", "baseline_peak_rss_kib", "webhook_idle_rss_kib", "webhook_peak_rss_kib"):
        if key in memory:
            print(f"| {key.replace('_kib', '').replace('_', ' ')} | {memory[key] / 1024:.1f} MiB |")
    for key in ("record_bytes_mean", "record_bytes_max", "stream_bytes_per_entry"):
        if key in memory:
            print(f"| Redis {key.replace('_', ' ')} | {memory[key]:.0f} B |")
    if "record_key_example" in memory:
        print(f"\nexample record: `{memory['record_key_example']}` → `{memory['record_value_example']}`")
