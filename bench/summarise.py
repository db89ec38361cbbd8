"""Turns one bench/run output directory into the Markdown tables of BENCHMARKS.md.

Each figure is the median over the rounds of that scenario and server; the ratio columns divide
hookonce's median by the other server's median. Nothing is estimated: a missing file is a
missing row. Files per run NAME: NAME.json (hookonce-loadgen) or NAME.wrk.json (wrk's line from
bench/wrk-signed.lua), NAME.cpu (the server's CPU ticks), NAME.redis (Redis CPU, stream entries,
hookonce's duplicate count, INFO commandstats).
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


def load_json(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def redis_of(path):
    """NAME.redis beside a run's NAME.json / NAME.wrk.json."""
    return load_json(path.replace(".wrk.json", ".redis").replace(".json", ".redis"))


def per_event_redis(paths):
    """Redis CPU µs per stream entry (event forwarded), median over runs."""
    values = []
    for path in paths:
        r = redis_of(path)
        if r and r["xlen"]:
            values.append(r["cpu_s"] * 1e6 / r["xlen"])
    return median(values)


def server_cpu(path, requests):
    c = load_json(path.replace(".wrk.json", ".cpu").replace(".json", ".cpu"))
    return c["ticks"] / c["hz"] * 1e6 / max(requests, 1) if c else float("nan")


def client_cpu(path, requests):
    """The client's own CPU µs per request: NAME.client (loadgen) or NAME.wrk.client (wrk)."""
    client = path[: -len(".json")] + ".client"
    if not os.path.exists(client):
        return float("nan")
    with open(client) as f:
        return float(f.read()) * 1e6 / max(requests, 1)


def wrk_row(scenario, server):
    paths = sorted(glob.glob(os.path.join(out, f"{scenario}-{server}-*.wrk.json")))
    found = [(p, load_json(p)) for p in paths]
    found = [(p, w) for p, w in found if w]
    if not found:
        return None
    rps = [w["requests"] / (w["duration_us"] / 1e6) for _, w in found]
    checks = []
    for p, w in found:
        r = redis_of(p) or {}
        ok = w["requests"] - w["non2xx"]
        checks.append({"run": os.path.basename(p).replace(".wrk.json", ""), "requests": w["requests"],
                       "non2xx": w["non2xx"], "errors": w["errors"], "wraps": w["wraps"],
                       "capacity": w["capacity"], "xlen": r.get("xlen"), "dup_hits": r.get("dup_hits"),
                       "ok": ok})
    return {
        "rps": median(rps),
        "p50": median([w["p50_us"] for _, w in found]) / 1000,
        "p90": median([w["p90_us"] for _, w in found]) / 1000,
        "p99": median([w["p99_us"] for _, w in found]) / 1000,
        "p999": median([w["p999_us"] for _, w in found]) / 1000,
        "cpu": median([server_cpu(p, w["requests"]) for p, w in found]),
        "client": median([client_cpu(p, w["requests"]) for p, w in found]),
        "redis": per_event_redis([p for p, _ in found]),
        "all_rps": [round(x) for x in rps],
        "checks": checks,
    }


def median(values):
    return statistics.median(values) if values else float("nan")


def fmt(value, spec):
    return "–" if value != value else format(value, spec)  # NaN: no such figure (no Redis, say)


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
    paths = sorted(glob.glob(os.path.join(out, f"{scenario}-{server}-*.json")))
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
        "redis": per_event_redis(paths),
        "client": median([client_cpu(p, x["requests"]) for p, x in zip(paths, r)]),
        "rounds": len(r),
        "all_rps": [round(x["requests_per_second"]) for x in r],
    }


scenarios = [
    ("unique", "GitHub scheme, all events unique", ["hookonce", "bare", "baseline", "baseline+jemalloc", "webhook"]),
] + [
    (f"rate{r}", f"GitHub scheme, unique, open loop at {r} requests/s", ["hookonce", "baseline", "baseline+jemalloc", "webhook"])
    for r in rates
] + [
    ("dup10", "GitHub scheme, ~10% duplicate deliveries", ["hookonce", "baseline", "baseline+jemalloc"]),
    ("stripe", "Stripe scheme, all events unique", ["hookonce", "baseline", "baseline+jemalloc"]),
    ("adyen5", "Adyen batches of 5 items (events/s = 5 × requests/s)", ["hookonce", "baseline", "baseline+jemalloc"]),
]
print("hookonce-loadgen (closed loop unless the scenario says open loop):\n")
print("| scenario | server | requests/s | events/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | service p50 / p99 ms | server CPU µs/request | Redis CPU µs/event | 2xx | rounds (requests/s) |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
ratios = []
for key, title, servers in scenarios:
    rows = {s: row(key, s) for s in servers}
    for server in servers:
        r = rows[server]
        if r is None:
            continue
        print(f"| {title} | {server} | {r['rps']:.0f} | {r['eps']:.0f} | {r['p50']:.2f} | {r['p90']:.2f} | "
              f"{r['p99']:.2f} | {r['p999']:.2f} | {r['max']:.2f} | {r['s50']:.2f} / {r['s99']:.2f} | {r['cpu']:.0f} | "
              f"{fmt(r['redis'], '.1f')} | {r['ok']:.1%} | {r['all_rps']} |")
    hk = rows.get("hookonce")
    if key.startswith("rate"):
        continue  # same offered load for everyone: compare the latency columns instead
    for other in servers[1:]:
        if hk and rows.get(other):
            cpu = hk["cpu"] / rows[other]["cpu"] if rows[other]["cpu"] else float("nan")
            ratios.append((title, other, hk["rps"] / rows[other]["rps"], cpu))

print()
print("| scenario | hookonce ÷ | throughput ratio | server CPU per request ratio |")
print("|---|---|---:|---:|")
for title, other, ratio, cpu in ratios:
    print(f"| {title} | {other} | {ratio:.2f}× | {fmt(cpu, '.2f')}× |")

# wrk and hookonce-loadgen side by side, same servers, same round.
pairs = [
    ("wrk", "unique", "GitHub scheme, all unique", ["hookonce", "bare", "baseline", "baseline+jemalloc", "webhook"]),
    ("wrkstripe", "stripe", "Stripe scheme, all unique", ["hookonce", "baseline", "baseline+jemalloc"]),
]
if any(wrk_row(w, s) for w, _, _, servers in pairs for s in servers):
    print()
    print("wrk (bench/wrk-signed.lua, every request a new signed delivery) beside hookonce-loadgen, "
          "closed loop, same connections; ratio = hookonce ÷ that server (requests/s):\n")
    print("| scenario | server | client | requests/s | p50 ms | p90 ms | p99 ms | p99.9 ms | server CPU µs/request | Redis CPU µs/event | client CPU µs/request | hookonce ÷ this | rounds (requests/s) |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    checks = []
    for wkey, lkey, title, servers in pairs:
        wrows = {s: wrk_row(wkey, s) for s in servers}
        lrows = {s: row(lkey, s) for s in servers}
        for server in servers:
            for client, r in (("loadgen", lrows[server]), ("wrk", wrows[server])):
                if r is None:
                    continue
                hk = (lrows if client == "loadgen" else wrows).get("hookonce")
                ratio = (f"{hk['rps'] / r['rps']:.2f}× (CPU {hk['cpu'] / r['cpu']:.2f}×)"
                         if hk and server != "hookonce" and r["cpu"] else "–")
                print(f"| {title} | {server} | {client} | {r['rps']:.0f} | {r['p50']:.2f} | {r['p90']:.2f} | "
                      f"{r['p99']:.2f} | {r['p999']:.2f} | {r['cpu']:.0f} | {fmt(r['redis'], '.1f')} | {fmt(r['client'], '.0f')} | {ratio} | {r['all_rps']} |")
            if wrows[server]:
                checks += wrows[server]["checks"]
    print()
    print("Every wrk request a new event? A wrap means a thread used up its share of the signed "
          "requests and sent some again; fewer stream entries than 2xx answers means some were "
          "answered as duplicates (hookonce also counts them in /metrics). In-flight requests "
          "cut at the end of a run may leave up to one entry per connection more than answers.\n")
    print("| run | requests | non-2xx | socket errors | wraps (of signed) | stream entries | hookonce duplicates | all unique |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for c in checks:
        stored = c["xlen"] is not None and not c["run"].startswith("wrk-webhook")
        unique = c["wraps"] == 0 and (not stored or c["xlen"] >= c["ok"]) and not c["dup_hits"]
        print(f"| {c['run']} | {c['requests']} | {c['non2xx']} | {c['errors']} | {c['wraps']} ({c['capacity']}) | "
              f"{c['xlen'] if stored else '– (stores nothing)'} | {c['dup_hits'] if c['run'].startswith('wrk-hookonce') or c['run'].startswith('wrkstripe-hookonce') else '–'} | "
              f"{'yes' if unique else '**NO**'} |")

# Redis commands per event: INFO commandstats after CONFIG RESETSTAT, per run (median over rounds).
command_rows = []
for path in sorted(glob.glob(os.path.join(out, "*.redis"))):
    name = os.path.basename(path)[:-len(".redis")]
    r = load_json(path)
    if not r or not r["xlen"]:
        continue
    if name.startswith("warmup-"):
        continue
    command_rows.append((name.rsplit("-", 1)[0], r))
if command_rows:
    grouped = {}
    for key, r in command_rows:
        grouped.setdefault(key, []).append(r)
    print()
    print("Redis per event (stream entry), INFO cpu and INFO commandstats after CONFIG RESETSTAT; "
          "commands run inside the script count too; medians over rounds:\n")
    print("| run | Redis CPU µs/event | evalsha calls/event | µs/call | xadd µs/call | other commands (calls/event) |")
    print("|---|---:|---:|---:|---:|---|")
    for key in sorted(grouped):
        rs = grouped[key]
        def per(cmd, field):
            vals = [x["commands"][cmd][field] / (x["xlen"] if field == "calls" else max(x["commands"][cmd]["calls"], 1))
                    for x in rs if cmd in x["commands"]]
            return median(vals)
        others = sorted({c for x in rs for c in x["commands"]} - {"evalsha", "xadd", "flushall", "config|resetstat", "info", "xlen", "config"})
        other = ", ".join(f"{c} {per(c, 'calls'):.2f}" for c in others)
        print(f"| {key} | {median([x['cpu_s'] * 1e6 / x['xlen'] for x in rs]):.1f} | {fmt(per('evalsha', 'calls'), '.2f')} | "
              f"{fmt(per('evalsha', 'usec'), '.1f')} | {fmt(per('xadd', 'usec'), '.1f')} | {other} |")

# Latency: open loop service time against the goal, and closed loop (saturation) p99.
if rates:
    print()
    print("Latency (ms). Open loop: service time (first byte written → answer), goal p99 ≤ 3 ms; "
          "saturation: closed loop, 50 connections, goal p99 ≤ 5 ms:\n")
    print("| server | " + " | ".join(f"{r}/s service p50 / p99" for r in rates) + " | saturation p99 loadgen | saturation p99 wrk |")
    print("|---|" + "---:|" * (len(rates) + 2))
    for server in ["hookonce", "bare", "baseline", "baseline+jemalloc", "webhook"]:
        cells = []
        for rate in rates:
            r = row(f"rate{rate}", server)
            cells.append(f"{r['s50']:.2f} / {r['s99']:.2f}" if r else "–")
        lg, wk = row("unique", server), wrk_row("wrk", server)
        cells.append(f"{lg['p99']:.2f}" if lg else "–")
        cells.append(f"{wk['p99']:.2f}" if wk else "–")
        if any(c != "–" for c in cells):
            print(f"| {server} | " + " | ".join(cells) + " |")

bench = []
for path in sorted(glob.glob(os.path.join(out, "redis-benchmark-*.csv"))):
    with open(path) as f:
        rows = [r for r in csv.reader(f) if r and r[0] != "test" and len(r) > 6 and r[1].replace(".", "", 1).isdigit()]
    if rows:
        bench.append(rows[-1])
error = os.path.join(out, "redis-benchmark-error.txt")
if os.path.exists(error):
    with open(error) as f:
        print()
        print(f"redis-benchmark not run: {f.read().strip()}")
entries = []
for path in sorted(glob.glob(os.path.join(out, "redis-benchmark-*.entries"))):
    with open(path) as f:
        entries.append(int(f.read().strip() or 0))
if bench:
    rps = median([float(r[1]) for r in bench])
    p50 = median([float(r[4]) for r in bench])
    p99 = median([float(r[6]) for r in bench])
    print()
    print(f"redis-benchmark, the same script by EVALSHA, 50 clients, 1.5 KB body: "
          f"{rps:.0f} calls/s (median of {len(bench)}; {[round(float(r[1])) for r in bench]}), "
          f"p50 {p50:.3f} ms, p99 {p99:.3f} ms"
          + (f"; stream entries after each round {entries} (error replies would leave none)" if entries else ""))
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
    if memory.get("alternatives"):
        print()
        print("What other record layouts would take (MEMORY USAGE of same-length stand-ins; the "
              "expires-table entry, 24 B more each, is left out by MEMORY USAGE in every row):\n")
        print("| layout | key B | value B | MEMORY USAGE | vs today |")
        print("|---|---:|---:|---:|---:|")
        today = memory["alternatives"][0]["memory_usage"]
        for a in memory["alternatives"]:
            print(f"| {a['layout']} | {a['key_bytes']} | {a['value_bytes']} | {a['memory_usage']} B | {a['memory_usage'] - today:+d} B |")

steady = [load_json(os.path.join(out, f"memory-{m}.rss.json")) for m in ("scraped", "unscraped")]
steady = [s for s in steady if s]
if steady:
    settings = load_json(os.path.join(out, "settings.json")) or {}
    print()
    print(f"hookonce RSS under steady load (GitHub, {settings.get('memory_rate', '?')} requests/s for "
          f"{settings.get('memory_duration', '?')}, a fresh daemon each, sampled every second; goal ≤ 50 MiB):\n")
    print("| /metrics | first sample | peak (VmHWM) | end | requests | service p99 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for s in steady:
        run = load_json(os.path.join(out, f"memory-{s['mode']}.json")) or {}
        samples = []
        with open(os.path.join(out, f"memory-{s['mode']}.rss")) as f:
            samples = [int(line.split()[1]) for line in f if len(line.split()) == 2]
        print(f"| {s['mode']} | {s['idle_kib'] / 1024:.1f} MiB | {s['peak_kib'] / 1024:.1f} MiB "
              f"(sampled max {max(samples, default=0) / 1024:.1f}) | {s['end_kib'] / 1024:.1f} MiB | "
              f"{run.get('requests', '–')} | {run.get('service_us', {}).get('p99', float('nan')) / 1000:.2f} |")
