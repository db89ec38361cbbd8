#!/usr/bin/env python3
"""The daemon's hot functions, hottest first, as the linker's symbol ordering file.

    bench/hot_functions.py write BINARY COMMIT DUMP… [--then DUMP…] > build/hot-functions.txt
    bench/hot_functions.py check BINARY ORDER_FILE [LEAST]


Each DUMP is a callgrind dump of BINARY under load, written with `--demangle=no` so that its
names are the symbols themselves (bench/hot-functions makes them). A function's weight is its
share of its dump's instructions in BINARY, summed over the dumps, so that each workload counts
alike however long it ran. The dumps after `--then` come second: their functions that the
first dumps did not run follow all of those, ranked the same way, so that a second path's code
(the relay's) does not spread the first paths' (the webhooks' and the proxy's) over more pages.
Functions valgrind cannot run (those that use the CPU's SHA extensions, which it hides: the
request path takes them on real hardware instead of the software rounds the dumps show) are
taken from BINARY's symbol table and put first.

`check` says how many of ORDER_FILE's functions BINARY defines, and on how many 4 KiB pages
they lie; given LEAST (a share, 0.9), it warns and exits 1 when BINARY defines fewer: the order
is stale (a toolchain or dependency update renames every function by its hash) and
bench/hot-functions should write it again.
"""

import collections
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import layers  # noqa: E402  (bench/layers.py: the dump's self costs)

# Symbols of code that runs natively where valgrind runs a software fallback: two-lane SHA-NI
# (crates/sha256-pair) and the sha2 crate's SHA-NI rounds.
NATIVE_ONLY = ("11sha256_pair5shani", "4sha26sha2563x86")


def code_symbols(binary):
    """BINARY's code symbols (the symbol table's t, T, w and W: data has its own sections), each
    name with the address and size of every definition."""
    listing = subprocess.run(
        ["nm", "-S", "--defined-only", binary], check=True, capture_output=True, text=True
    ).stdout
    symbols = collections.defaultdict(list)
    for parts in map(str.split, listing.splitlines()):
        if len(parts) >= 3 and parts[-2] in "tTwW":
            size = int(parts[1], 16) if len(parts) == 4 else 0
            symbols[parts[-1]].append((int(parts[0], 16), size))
    return symbols


def ranked(binary, defined, dumps):
    """The functions of `defined` that DUMPS ran, by their summed share of each dump, hottest
    first."""
    weight = collections.Counter()
    for dump in dumps:
        costs = layers.self_costs(dump, in_object=os.path.basename(binary))
        total = sum(costs.values()) or 1
        for name, cost in costs.items():
            if name in defined:
                weight[name] += cost / total
    return [name for name, _ in weight.most_common()]


def write(binary, commit, dumps, then=()):
    defined = code_symbols(binary)
    first = ranked(binary, defined, dumps)
    seen = set(first)
    order = first + [name for name in ranked(binary, defined, then) if name not in seen]
    native = sorted(name for name in defined if any(part in name for part in NATIVE_ONLY))
    print("# The daemon's hot functions in the order the linker places them (build.rs passes this")
    print("# file to lld as --symbol-ordering-file): the request paths' code on a few hundred pages")
    print("# instead of spread over the whole text section. Written by bench/hot-functions from")
    profile = os.path.basename(os.path.dirname(os.path.abspath(binary)))
    print(f"# callgrind runs of the {profile} build of {commit}; hottest first. A symbol the build does")
    print("# not define (renamed, inlined, another profile) is skipped.")
    if then:
        print(f"# The first {len(first)} ran in the first runs; the rest only in the later ones.")
    for name in native:
        print(name)
    for name in order:
        if name not in native:
            print(name)


def check(binary, order, least=None):
    with open(order) as listed:
        wanted = [line.strip() for line in listed if line.strip() and not line.startswith("#")]
    defined = code_symbols(binary)
    places = [place for name in wanted for place in defined.get(name, [])]
    pages = {
        page
        for start, size in places
        for page in range(start // 4096, (start + max(size, 1) - 1) // 4096 + 1)
    }
    found = sum(name in defined for name in wanted)
    print(
        f"{found} of {len(wanted)} hot functions defined in {binary}: "
        f"{sum(size for _, size in places) // 1024} KiB on {len(pages)} pages of 4 KiB"
    )
    if least is not None and found < least * len(wanted):
        print(
            f"warning: {binary} defines only {found} of the {len(wanted)} functions of {order}: "
            "the order is stale (functions renamed by a toolchain or dependency update, which "
            "changes their hash, or by a change to the code), and fewer hot functions lie "
            "together; run bench/hot-functions to write it again",
            file=sys.stderr,
        )
        sys.exit(1)


def main():
    command, binary, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    if command == "write":
        dumps = rest[1:]
        split = dumps.index("--then") if "--then" in dumps else len(dumps)
        write(binary, rest[0], dumps[:split], dumps[split + 1 :])
    elif command == "check":
        check(binary, rest[0], float(rest[1]) if len(rest) > 1 else None)
    else:
        sys.exit(f"unknown command {command!r}: write or check")


if __name__ == "__main__":
    main()
