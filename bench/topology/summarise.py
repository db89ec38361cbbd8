"""Turns one bench/topology/run output directory into the Markdown of BENCHMARKS.md's "Redis
topologies" section: a table per configuration, the ratios, and the predictions for a cluster
on separate machines.

Every figure in the tables is the median over the rounds of that configuration. The
predictions are derived, not measured: they divide a second by the CPU time per event that a
process was measured to spend, and say so.
"""
import glob
import json
import os
import re
import statistics
import sys

out = sys.argv[1]


def load(path):
    with open(path) as f:
        return json.load(f)


def median(values):
    return statistics.median(values) if values else float("nan")


def one_round(path):
    """One run: throughput, latency and CPU per event of every process."""
    run = load(path)
    base = path[: -len(".run.json")]
    gens = [load(f"{base}-{s}.json") for s in run["sources"]]
    events = sum(round(g["events_per_second"] * g["seconds"]) for g in gens)
    non_2xx = sum(n for g in gens for s, n in g["statuses"].items() if not s.startswith("2"))
    gen_cpu = 0.0
    for s in run["sources"]:
        with open(f"{base}-{s}.time") as f:
            gen_cpu += sum(float(x) for x in f.read().split()[-2:])
    # What the rest of the machine (other users' builds and tests) took meanwhile, in cores.
    other = None
    if "machine_busy_ticks" in run:
        busy = run["machine_busy_ticks"] - sum(run["ticks"]) - gen_cpu * run["hz"]
        other = max(busy / run["hz"] / run["wall_seconds"], 0.0)
    us = lambda ticks: ticks / run["hz"] * 1e6 / max(events, 1)
    cpu = dict(zip(run["processes"], (us(t) for t in run["ticks"])))
    return {
        "eps": sum(g["events_per_second"] for g in gens),
        # Several generators at once: the slowest one's percentiles.
        "p50": max(g["latency_us"]["p50"] for g in gens) / 1000,
        "p99": max(g["latency_us"]["p99"] for g in gens) / 1000,
        "events": events,
        "non_2xx": non_2xx,
        "daemon": cpu.pop("daemon"),
        "redis": cpu,
        "generator": gen_cpu * 1e6 / max(events, 1),
        "bytes": (run["used_memory_after"] - run["used_memory_before"]) / max(events, 1),
        "audits": run["audits"],
        "other": other,
    }


def configuration(workload, topology):
    rounds = [one_round(p) for p in sorted(glob.glob(os.path.join(out, f"{workload}-{topology}-*.run.json")))]
    if not rounds:
        return None
    ports = list(rounds[0]["redis"])
    return {
        "eps": median([r["eps"] for r in rounds]),
        "p50": median([r["p50"] for r in rounds]),
        "p99": median([r["p99"] for r in rounds]),
        "daemon": median([r["daemon"] for r in rounds]),
        "redis": {p: median([r["redis"][p] for r in rounds]) for p in ports},
        "redis_sum": median([sum(r["redis"].values()) for r in rounds]),
        "generator": median([r["generator"] for r in rounds]),
        "bytes": median([r["bytes"] for r in rounds]),
        "non_2xx": sum(r["non_2xx"] for r in rounds),
        "audits": [a for r in rounds for a in r["audits"]],
        "all_eps": [round(r["eps"]) for r in rounds],
        "other": median([r["other"] for r in rounds if r["other"] is not None]),
    }


placement = {}
with open(os.path.join(out, "placement.txt")) as f:
    for line in f.read().split("\n")[1:]:
        if line:
            tag, port = line.split()
            placement[tag] = port
hot_tags = sorted(t for t in placement if "." in t)
hot_source = hot_tags[0].split(".")[0]
one_port = placement["one"]
many = [t for t in placement if t not in ("one",) and "." not in t]
share = {}
for t in hot_tags:
    share[placement[t]] = share.get(placement[t], 0) + 1 / len(hot_tags)
hot_max_share = max(share.values())

WORKLOADS = {
    "one": "one source, partitions = 1",
    "many": f"3 sources on 3 masters ({', '.join(many)})",
    "hot4": f"one source, partitions = 4 ({hot_source})",
}
TOPOLOGIES = {
    "standalone": "standalone",
    "cluster": "cluster, 3 masters",
    "wait0": "cluster 3 + 3 replicas, wait_replicas = 0",
    "wait1": "cluster 3 + 3 replicas, wait_replicas = 1",
}
results = {(w, t): configuration(w, t) for w in WORKLOADS for t in TOPOLOGIES}


def fmt_redis(c, topology):
    if topology == "standalone":
        return f"{c['redis_sum']:.1f}"
    parts = []
    for port, v in c["redis"].items():
        parts.append(f"{v:.1f}")
    masters = parts[:3]
    text = " + ".join(masters)
    if len(parts) > 3:
        text += " (replicas " + " + ".join(parts[3:]) + ")"
    return f"{text} = {c['redis_sum']:.1f}"


cores = open(os.path.join(out, "cores.txt")).read().strip()
revision = open(os.path.join(out, "revision.txt")).read().split("\n")[0]
print(f"Topology benchmark `{os.path.basename(out)}` at {revision[:7]}, {cores} cores shared by "
      "the daemon, every redis-server and the generators; Stripe events, ~1.5 KB bodies, "
      "closed loop, medians over the rounds.\n")
print("Placement (CLUSTER KEYSLOT → master port): " + ", ".join(f"`{{{t}}}` → {p}" for t, p in placement.items()) + "\n")
print("| workload | Redis | events/s | p50 ms | p99 ms | daemon CPU µs/event | redis-server CPU µs/event (each) | generators µs/event | Redis bytes/event (all nodes) | non-2xx | audits | other processes' CPU (cores) | rounds (events/s) |")
print("|---|---|---:|---:|---:|---:|---|---:|---:|---:|---|---:|---|")
for (w, t), c in results.items():
    if not c:
        continue
    passed = c["audits"].count("PASS")
    print(f"| {WORKLOADS[w]} | {TOPOLOGIES[t]} | {c['eps']:,.0f} | {c['p50']:.2f} | {c['p99']:.2f} | "
          f"{c['daemon']:.1f} | {fmt_redis(c, t)} | {c['generator']:.1f} | {c['bytes']:,.0f} | {c['non_2xx']} | "
          f"{passed}/{len(c['audits'])} PASS | {c['other']:.2f} | {', '.join(f'{x:,}' for x in c['all_eps'])} |")

print("\nRatios of the medians (events/s):\n")
print("| comparison | ratio |")
print("|---|---:|")
def ratio(a, b, label):
    if results.get(a) and results.get(b):
        print(f"| {label} | {results[a]['eps'] / results[b]['eps']:.2f}× |")
for w in WORKLOADS:
    ratio((w, "cluster"), (w, "standalone"), f"{WORKLOADS[w]}: cluster ÷ standalone")
for t in ("standalone", "cluster", "wait0", "wait1"):
    ratio(("hot4", t), ("one", t), f"{TOPOLOGIES[t]}: partitions 4 ÷ 1")
for t in ("standalone", "cluster"):
    ratio(("many", t), ("one", t), f"{TOPOLOGIES[t]}: 3 sources ÷ 1 source")
for w in ("one", "hot4"):
    ratio((w, "wait1"), (w, "wait0"), f"{WORKLOADS[w]}: wait_replicas 1 ÷ 0")
    ratio((w, "wait0"), (w, "cluster"), f"{WORKLOADS[w]}: replicas attached (wait 0) ÷ no replicas")

# Predictions from measured CPU per event.
one_s, one_c = results.get(("one", "standalone")), results.get(("one", "cluster"))
if one_s and one_c:
    master_us = one_c["redis"]["redis:" + one_port]
    standalone_us = one_s["redis_sum"]
    daemon_us = one_c["daemon"]
    per_master = 1e6 / master_us
    print("\n**Predictions** for Redis on machines of its own (derived from the CPU per event "
          "measured above, not measured): a redis-server runs its commands on one thread, so a "
          "master with a core to itself carries at most 1 s ÷ its CPU per event.\n")
    print("| what | derived from | predicted |")
    print("|---|---|---:|")
    print(f"| one standalone Redis, events/s | 1 s ÷ {standalone_us:.1f} µs | {1e6 / standalone_us:,.0f} |")
    print(f"| one cluster master, events/s (a source or partition on it) | 1 s ÷ {master_us:.1f} µs (master of `{{one}}`) | {per_master:,.0f} |")
    # A master that serves a share of the events: its CPU ÷ the events it served.
    spread = []
    for w, shares in (("many", {placement[t]: 1 / 3 for t in many}), ("hot4", share)):
        c = results.get((w, "cluster"))
        if c:
            spread += [c["redis"]["redis:" + port] / part for port, part in shares.items()]
    if spread:
        worst = max(spread)
        print(f"| one cluster master, conservative: from the masters that served a share (3 sources, partitions = 4), their CPU ÷ the events each served, {min(spread):.1f}–{worst:.1f} µs | 1 s ÷ {worst:.1f} µs | {1e6 / worst:,.0f} |")
    print(f"| 3 sources of equal rate on 3 masters | 3 × {per_master:,.0f} | {3 * per_master:,.0f} |")
    print(f"| one source, partitions = 4 placed {'/'.join(str(round(v * 4)) for v in sorted(share.values(), reverse=True))} on 3 masters | {per_master:,.0f} ÷ {hot_max_share:.2f} (the busiest master's share) | {per_master / hot_max_share:,.0f} |")
    print(f"| one source, partitions = N spread evenly over M masters (N a multiple of M) | M × {per_master:,.0f} | M × {per_master:,.0f} |")
    print(f"| daemon cores for those rates | {daemon_us:.1f} µs of daemon CPU per event | one core per {1e6 / daemon_us:,.0f} events/s |")
    w1, w0 = results.get(("one", "wait1")), results.get(("one", "wait0"))
    if w1 and w0:
        m1 = w1["redis"]["redis:" + one_port]
        print(f"| one master with wait_replicas = 1, events/s (Redis CPU only) | 1 s ÷ {m1:.1f} µs | {1e6 / m1:,.0f} |")

for s in ("gh", "ghb"):
    path = os.path.join(out, f"memory-{s}.redis.json")
    if not os.path.exists(path):
        continue
    if s == "gh":
        print("\nRedis bytes per event (standalone, GitHub source, 10 000 events, 1.5 KB bodies):\n")
        print("| body_dedup | event record (MEMORY USAGE) | body record | stream entry | record + stream entry (+ body record) | used_memory delta ÷ events |")
        print("|---|---:|---:|---:|---:|---:|")
    m = load(path)
    total = m["record_bytes"] + m["body_record_bytes"] + m["stream_bytes_per_entry"]
    print(f"| {'on' if s == 'ghb' else 'off'} | {m['record_bytes']:.0f} | {m['body_record_bytes']:.0f} | "
          f"{m['stream_bytes_per_entry']:.0f} | {total:,.0f} | {m['used_memory_delta_per_event']:,.0f} |")

seconds = os.path.join(out, "seconds.txt")
if os.path.exists(seconds):
    print(f"\nThe run took {int(open(seconds).read())} s.")
