#!/usr/bin/env python3
"""Checks that every metric the dashboard and the alert rules query is exported by a live daemon.

Starts `hookonce serve` on free loopback ports, waits until /metrics answers, sends one signed
webhook twice (forwarded, then duplicate) and one POST with an Idempotency-Key twice through the
config's proxy `demo` (executed, then replayed; its upstream is a tiny HTTP server in this script)
so per-source, per-proxy and per-operation series exist, scrapes /metrics (with a relay route `demo`
in the config, once the relay has delivered the webhook to that upstream too), stops the daemon by
its PID, and compares metric names. A queried histogram must be
queried through its exported series (`_bucket`, `_sum`, `_count`), as PromQL sees them.

Some series only exist with the Redis store (store and stream metrics), so with --redis-config and
--redis-server the same is done a second time against a throwaway redis-server on a free loopback
port, and the names exported by either daemon count.

Usage: check_metrics.py --bin BIN --config TOML [--redis-config TOML --redis-server BIN]
                        --dashboard JSON --rules YAML [--rules YAML ...]
"""

import argparse
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

NAME = re.compile(r"\bhookonce_[a-zA-Z0-9_]+")
STARTUP_SECONDS = 30


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dashboard_queries(path):
    """Every PromQL string of a Grafana dashboard: panel targets and templating queries."""
    with open(path) as f:
        dashboard = json.load(f)
    queries = []

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("expr", "definition") and isinstance(value, str):
                    queries.append(value)
                elif key == "query" and isinstance(value, str):
                    queries.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(dashboard.get("panels", []))
    walk(dashboard.get("templating", {}))
    return queries


def rule_queries(path):
    """Every `expr` of a Prometheus rules file."""
    import yaml  # from the venv scripts/test-chart runs this with

    with open(path) as f:
        doc = yaml.safe_load(f)
    return [rule["expr"] for group in doc.get("groups", []) for rule in group.get("rules", [])]


def http_get(url, timeout=2):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read().decode()


def post(url, body, headers):
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


class Upstream(http.server.BaseHTTPRequestHandler):
    """The demo proxy's upstream: answers every request 201 with a small JSON body."""

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = b'{"created":true}'
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def start_upstream():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def signed_headers(binary, config, env, body_path):
    out = subprocess.run(
        [binary, "sign", "--config", config, "--source", "demo", "--body", body_path,
         "--id", "chart-metrics-check-1", "--type", "ping"],
        env=env, check=True, capture_output=True, text=True,
    ).stdout
    headers = {}
    for line in out.splitlines():
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip()] = value.strip()
    return headers


def stop(process):
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def start_redis(redis_server):
    """A throwaway redis-server on a free loopback port; returns (process, url)."""
    port = free_port()
    process = subprocess.Popen(
        [redis_server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
         "--maxmemory-policy", "noeviction"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        if process.poll() is not None:
            sys.exit(f"FAIL: redis-server exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return process, f"redis://127.0.0.1:{port}"
        except OSError:
            pass
        if time.monotonic() > deadline:
            stop(process)
            sys.exit(f"FAIL: redis-server did not answer within {STARTUP_SECONDS}s")
        time.sleep(0.05)


def scrape_live_daemon(binary, config, extra_env=None):
    ports = set()
    while len(ports) < 3:
        ports.add(free_port())
    http_port, metrics_port, proxy_port = sorted(ports)
    upstream = start_upstream()
    env = dict(os.environ)
    env.update(extra_env or {})
    env["HOOKONCE__SERVER__LISTEN"] = f"127.0.0.1:{http_port}"
    env["HOOKONCE__SERVER__METRICS_LISTEN"] = f"127.0.0.1:{metrics_port}"
    env["HOOKONCE__PROXIES__DEMO__LISTEN"] = f"127.0.0.1:{proxy_port}"
    env["HOOKONCE__PROXIES__DEMO__UPSTREAM"] = f"http://127.0.0.1:{upstream.server_address[1]}"
    with open(config) as f:
        relays = "[relay.routes.demo]" in f.read()
    if relays:
        env["HOOKONCE__RELAY__ROUTES__DEMO__URL"] = f"http://127.0.0.1:{upstream.server_address[1]}/relay"
    env.setdefault("RUST_LOG", "warn")
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    log = tempfile.TemporaryFile()
    daemon = subprocess.Popen([binary, "serve", "--config", config], env=env,
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if daemon.poll() is not None:
                log.seek(0)
                sys.exit(f"FAIL: hookonce exited with {daemon.returncode} before /metrics answered:\n"
                         + log.read().decode(errors="replace"))
            try:
                status, _ = http_get(metrics_url)
                if status == 200:
                    break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.monotonic() > deadline:
                sys.exit(f"FAIL: {metrics_url} did not answer within {STARTUP_SECONDS}s")
            time.sleep(0.05)  # poll interval, not a wait for an outcome

        with tempfile.NamedTemporaryFile("wb", suffix=".json", delete=False) as body_file:
            body_file.write(b'{"zen":"Keep it logically awesome.","hook_id":1}')
        try:
            headers = signed_headers(binary, config, env, body_file.name)
            with open(body_file.name, "rb") as f:
                body = f.read()
        finally:
            os.unlink(body_file.name)
        webhook = f"http://127.0.0.1:{http_port}/webhooks/demo"
        first, second = post(webhook, body, headers), post(webhook, body, headers)
        print(f"webhook deliveries answered {first} then {second}")
        if first != 200 or second != 200:
            sys.exit(f"FAIL: expected 200 (forwarded) then 200 (duplicate), got {first} and {second}")
        order = f"http://127.0.0.1:{proxy_port}/v1/orders"
        keyed = {"Idempotency-Key": "chart-metrics-check-1", "Content-Type": "application/json"}
        first, second = post(order, b'{"sku":42}', keyed), post(order, b'{"sku":42}', keyed)
        print(f"proxied POSTs answered {first} then {second}")
        if first != 201 or second != 201:
            sys.exit(f"FAIL: expected 201 (executed) then 201 (replayed), got {first} and {second}")
        _, text = http_get(metrics_url)
        if relays:
            text = wait_for_relay_delivery(metrics_url, text)
        return text
    finally:
        stop(daemon)
        upstream.shutdown()


def wait_for_relay_delivery(metrics_url, text):
    """Scrapes until the relay's route `demo` has delivered the webhook (its end-to-end histogram
    counts one), so its delivery series are exported; returns that scrape."""
    delivered = re.compile(r'^hookonce_relay_end_to_end_seconds_count\{[^}]*route="demo"[^}]*\} [1-9]', re.M)
    deadline = time.monotonic() + STARTUP_SECONDS
    while not delivered.search(text):
        if time.monotonic() > deadline:
            sys.exit(f"FAIL: the relay did not deliver the webhook within {STARTUP_SECONDS}s")
        time.sleep(0.1)  # poll interval, not a wait for an outcome
        _, text = http_get(metrics_url)
    print("the relay delivered the webhook to route demo")
    return text


def exported_names(text):
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--redis-config")
    parser.add_argument("--redis-server")
    parser.add_argument("--dashboard", required=True)
    parser.add_argument("--rules", action="append", default=[])
    args = parser.parse_args()

    used = {}  # metric name -> where it is queried
    for query in dashboard_queries(args.dashboard):
        for name in NAME.findall(query):
            used.setdefault(name, set()).add("dashboard")
    for path in args.rules:
        for query in rule_queries(path):
            for name in NAME.findall(query):
                used.setdefault(name, set()).add("alerts")
    if not used:
        sys.exit("FAIL: found no hookonce_ metric in the dashboard or the rules")

    print(f"scraping a daemon with {args.config}")
    exported = exported_names(scrape_live_daemon(args.bin, args.config))
    if args.redis_config:
        if not args.redis_server:
            sys.exit("FAIL: --redis-config needs --redis-server")
        redis, url = start_redis(args.redis_server)
        try:
            print(f"scraping a daemon with {args.redis_config} against redis-server at {url}")
            exported |= exported_names(
                scrape_live_daemon(args.bin, args.redis_config, {"HOOKONCE__STORE__REDIS_URL": url}))
        finally:
            stop(redis)
    missing = sorted(name for name in used if name not in exported)
    for name in sorted(used):
        state = "MISSING" if name in missing else "ok"
        print(f"  {state:8} {name}  ({', '.join(sorted(used[name]))})")
    if missing:
        print(f"FAIL: {len(missing)} queried metric(s) not exported by the daemon: {', '.join(missing)}",
              file=sys.stderr)
        print("exported: " + ", ".join(sorted(n for n in exported if n.startswith("hookonce_"))),
              file=sys.stderr)
        sys.exit(1)
    print(f"all {len(used)} queried metric names are exported")


if __name__ == "__main__":
    main()
