#!/usr/bin/env python3
"""Instructions per request by layer, from one callgrind dump (bench/instructions writes it).

    bench/layers.py CALLGRIND_OUT REQUESTS NAME [--detail]

Every instruction is counted once, where it ran (callgrind's self cost), and put in the layer of
the function it ran in: its crate (the first segment of the symbol; code inlined into a function
counts as that function's), hookonce's own code by its module, the allocator and libc's memory
functions by name. The layers therefore add up to the whole. User-space instructions only: the
kernel's work for a request (socket reads and writes, epoll, futex) is not in them.

With INSTR_CACHE=1 the dump also holds callgrind's cache simulation (the host's L1 geometry, no
prefetching), and the L1 misses per request are printed after the layers: at equal instruction
counts, the memory a request touches for the first time (a future moved into a new box, say) is
what tells two servers apart.

SHA-256 is shown apart: valgrind hides the CPU's SHA extensions, so under callgrind the sha2
crate runs its software rounds (about 3 600 instructions per 64-byte block), which a native run
does in a fraction of that. Compare the servers on the total without it.
"""

import collections
import re
import sys

# Symbol crate (or hookonce module) -> layer. Anything else is "other".
LAYER_OF = {
    "hyper": "HTTP/1 (hyper, httparse, http)",
    "httparse": "HTTP/1 (hyper, httparse, http)",
    "http": "HTTP/1 (hyper, httparse, http)",
    "http_body": "HTTP/1 (hyper, httparse, http)",
    "http_body_util": "HTTP/1 (hyper, httparse, http)",
    "hyper_util": "HTTP/1 (hyper, httparse, http)",
    "axum": "router and extractors (axum, tower)",
    "axum_core": "router and extractors (axum, tower)",
    "tower": "router and extractors (axum, tower)",
    "matchit": "router and extractors (axum, tower)",
    "percent_encoding": "router and extractors (axum, tower)",
    "serde": "router and extractors (axum, tower)",
    "serde_path_to_error": "router and extractors (axum, tower)",
    "tokio::time": "timers (tokio time driver)",
    "tokio::runtime::time": "timers (tokio time driver)",
    "tokio": "tokio runtime (tasks, I/O driver, scheduler)",
    "mio": "tokio runtime (tasks, I/O driver, scheduler)",
    "futures_util": "tokio runtime (tasks, I/O driver, scheduler)",
    "futures_core": "tokio runtime (tasks, I/O driver, scheduler)",
    "futures_channel": "tokio runtime (tasks, I/O driver, scheduler)",
    "redis": "redis-rs (encode, connection, parse)",
    "combine": "redis-rs (encode, connection, parse)",
    "itoa": "redis-rs (encode, connection, parse)",
    "ryu": "redis-rs (encode, connection, parse)",
    "sha2": "SHA-256 blocks (software under valgrind)",
    "hmac": "verification (HMAC setup, hex, headers)",
    "digest": "verification (HMAC setup, hex, headers)",
    "hex": "verification (HMAC setup, hex, headers)",
    "subtle": "verification (HMAC setup, hex, headers)",
    "hookonce::webhooks::providers": "verification (HMAC setup, hex, headers)",
    "hookonce::event": "verification (HMAC setup, hex, headers)",
    "hookonce_bare": "handler (bare: HMAC key, headers, script args)",
    "metrics": "metrics (counters, gauges, histograms)",
    "metrics_util": "metrics (counters, gauges, histograms)",
    "metrics_exporter_prometheus": "metrics (counters, gauges, histograms)",
    "hookonce::metrics": "metrics (counters, gauges, histograms)",
    "tracing": "logging (tracing, JSON line, writer)",
    "tracing_core": "logging (tracing, JSON line, writer)",
    "tracing_subscriber": "logging (tracing, JSON line, writer)",
    "hookonce::cli": "logging (tracing, JSON line, writer)",
    "hookonce::body": "body reading (collect, budget, gauges)",
    "hookonce::admission": "admission",
    "hookonce::access": "access (client address, gate)",
    "hookonce::server": "server (accept, lingering body, route)",
    "hookonce::webhooks": "ingest (pipeline, outcome, reply)",
    "hookonce::outcome": "ingest (pipeline, outcome, reply)",
    "hookonce::forward::coalesce": "coalescing (lanes, queue, hand-offs)",
    "hookonce::forward::atomic": "forward (plan, segment, script args, verdicts)",
    "hookonce::forward::batch": "forward (plan, segment, script args, verdicts)",
    "hookonce::forward": "forward (plan, segment, script args, verdicts)",
    "hookonce::store": "forward (plan, segment, script args, verdicts)",
    "hookonce::telemetry": "ingest (pipeline, outcome, reply)",
    "hookonce::util": "ingest (pipeline, outcome, reply)",
    "allocator": "allocator (malloc, free)",
    "memory": "memcpy, memmove, memcmp",
    "syscall stubs": "libc syscall stubs and clock",
    "std": "std (formatting, collections, drop glue)",
}

ALLOC = re.compile(r"(^_?rjem_|^je_|jemalloc|^(malloc|free|realloc|calloc|cfree|_int_malloc|_int_free|"
                   r"_int_realloc|malloc_consolidate|tcache|unlink_chunk|__libc_(malloc|free|realloc|calloc)))")
MEMORY = re.compile(r"^__(mem|str|wmem)\w*(avx|sse|evex|erms|unaligned)|^(memcpy|memmove|memset|memcmp|bcmp)")
SYSCALL = re.compile(r"^(__libc_|__GI_|__)?(send|recv|read|write|epoll|clock_gettime|__vdso|syscall|"
                     r"futex|writev|sendto|recvfrom|pthread_|__pthread|__lll|lll_)")


def crate_key(name):
    """The crate (or hookonce module) a symbol belongs to."""
    if ALLOC.search(name):
        return "allocator"
    if MEMORY.search(name):
        return "memory"
    bare = name.lstrip("<&*").removeprefix("dyn ").removeprefix("mut ")
    segments = bare.split("::")
    head = segments[0]
    if head in ("core", "alloc", "std"):
        # Generic std code: the crate of the type it runs for, when one is named.
        inner = re.search(r"<(?:&(?:mut )?)?(hookonce(?:_bare)?|hyper|tokio|redis|axum|http|metrics\w*|tracing\w*)::", bare)
        if not inner:
            return "std"
        head = inner.group(1)
        segments = bare[inner.start(1):].split("::")
    if head == "hookonce" and len(segments) > 1:
        for depth in (3, 2):
            key = "::".join(segments[:depth])
            if key in LAYER_OF:
                return key
        return "hookonce::" + segments[1]
    if head == "tokio" and len(segments) > 2:
        for key in ("tokio::runtime::time", "tokio::time"):
            if bare.startswith(key):
                return key
    if SYSCALL.search(name) or head.startswith("__"):
        return "syscall stubs"
    return head


def compressed_name(line, table):
    """The name a dump's `fn=`, `cfn=`, `ob=` or `cob=` line gives, `(N) name` defining the
    number N for later lines of the same table, `(N)` alone using it."""
    text = line.rstrip("\n").split("=", 1)[1]
    m = re.match(r"\((\d+)\)(?: (.*))?$", text)
    if not m:
        return text
    if m.group(2) is not None:
        table[m.group(1)] = m.group(2)
    return table.get(m.group(1), m.group(1))


def self_costs(path, in_object=None):
    """Self cost per function name (all files, all threads of the dump); with `in_object`, only
    the functions of the object (executable or library) whose path ends so."""
    functions, objects, costs = {}, {}, collections.Counter()
    function, skip_next, counted = None, False, True
    with open(path, errors="replace") as dump:
        for line in dump:
            if line.startswith(("ob=", "cob=")):
                name = compressed_name(line, objects)
                if line.startswith("ob=") and in_object is not None:
                    counted = name.endswith(in_object)
                continue
            if line.startswith(("fn=", "cfn=")):
                name = compressed_name(line, functions)
                if line.startswith("fn="):
                    function = name
                continue
            if line.startswith("calls="):
                skip_next = True
                continue
            if line[:1].isdigit() or line[:1] in "+-*":
                if skip_next:
                    skip_next = False
                    continue
                parts = line.split()
                if len(parts) >= 2 and function is not None and counted:
                    costs[function] += int(parts[1])
    return costs


def cache_misses(path):
    """The dump's simulated L1 misses (callgrind --cache-sim=yes, INSTR_CACHE=1), or None."""
    events = None
    with open(path, errors="replace") as dump:
        for line in dump:
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith(("summary:", "totals:")) and events and "I1mr" in events:
                counts = dict(zip(events, map(int, line.split()[1:])))
                return counts["I1mr"], counts["D1mr"], counts["D1mw"]
    return None


def main():
    path, requests, name = sys.argv[1], max(int(sys.argv[2]), 1), sys.argv[3]
    detail = "--detail" in sys.argv
    costs = self_costs(path)
    layers, crates = collections.Counter(), collections.Counter()
    for function, cost in costs.items():
        key = crate_key(function)
        crates[key] += cost
        layers[LAYER_OF.get(key, f"other ({key})" if detail else "other")] += cost
    total = sum(costs.values())
    sha = layers.get("SHA-256 blocks (software under valgrind)", 0)
    print(f"{name}: {requests} requests; instructions per request {total / requests:,.0f}, "
          f"without SHA-256 blocks {(total - sha) / requests:,.0f}")
    print(f"{'layer':<52} {'instr/request':>14}")
    for layer, cost in sorted(layers.items(), key=lambda kv: -kv[1]):
        print(f"{layer:<52} {cost / requests:14,.0f}")
    misses = cache_misses(path)
    if misses:
        i1, d1r, d1w = (count / requests for count in misses)
        print(f"simulated L1 misses per request: instructions {i1:,.0f}, data reads {d1r:,.0f}, "
              f"data writes {d1w:,.0f}")
    if detail:
        print()
        for key, cost in crates.most_common(40):
            print(f"{key:<52} {cost / requests:14,.0f}")


if __name__ == "__main__":
    main()
