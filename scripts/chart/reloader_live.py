#!/usr/bin/env python3
"""Runs the chart's secrets-reloader script beside a live `hookonce serve`, for scripts/test-chart,
and fails unless a rotated secret is taken into use without a restart.

  reloader_live.py --bin BIN SCRIPT SHELL [ARG...]    e.g. reloader_live.py --bin target/debug/hookonce reloader.sh busybox sh

The daemon (memory store, stdout sink, one GitHub source `demo` whose secret comes from
`secrets_files`) reads a directory laid out as the kubelet lays out a Secret volume (see
reloader_check.py). It is started through a symbolic link with a name unique to this run, which
becomes its /proc/PID/comm: the reloader is told that name, so no other hookonce on the machine
can be signalled. Then, as in a Stripe rotation: a delivery signed with the new secret is refused
(401); the new secret is added as a second line and the reloader signals; deliveries signed with
either secret are accepted (200); the old line is removed and the reloader signals again; the old
secret is refused and the new one still accepted; `hookonce_config_reloads_total{result="applied"}`
is 2 and the daemon's PID never changed.
"""

import argparse
import os
import subprocess
import tempfile
import urllib.error
import urllib.request
import uuid

from live import applied_reloads, free_port, show_logs, stop, text
from reloader_check import eventually, write_secret

OLD, NEW = "github-old-secret", "github-new-secret"


def config(secrets_line):
    return f"""
[server]
listen = "127.0.0.1:8080"
metrics_listen = "127.0.0.1:9090"
[store]
backend = "memory"
[sink]
kind = "stdout"
[sources.demo]
provider = "github"
{secrets_line}
"""


def deliver(binary, signer, url, body_path):
    """One new delivery signed with the signer config's secret: the HTTP status."""
    headers = subprocess.run([binary, "sign", "--config", signer, "--source", "demo", "--body", body_path,
                              "--id", str(uuid.uuid4()), "--type", "push", "--log-format", "json"],
                             check=True, capture_output=True, text=True).stdout
    request = urllib.request.Request(url, data=open(body_path, "rb").read(), method="POST")
    for line in headers.splitlines():
        name, _, value = line.partition(": ")
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("script")
    parser.add_argument("shell", nargs="+")
    args = parser.parse_args()
    binary = os.path.abspath(args.bin)
    with tempfile.TemporaryDirectory() as tmp:
        watched = os.path.join(tmp, "secrets")
        os.mkdir(watched)
        write_secret(watched, 1, {"GITHUB_WEBHOOK_SECRET": f"{OLD}\n"})
        served, signer_old, signer_new, body = (os.path.join(tmp, n) for n in
                                                ("served.toml", "old.toml", "new.toml", "body.json"))
        with open(served, "w") as f:
            f.write(config(f'secrets_files = ["{watched}/GITHUB_WEBHOOK_SECRET"]'))
        for path, secret in ((signer_old, OLD), (signer_new, NEW)):
            with open(path, "w") as f:
                f.write(config(f'secrets = ["{secret}"]'))
        with open(body, "w") as f:
            f.write('{"ref": "refs/heads/main", "commits": []}')
        name = f"hkrl{os.getpid() % 100000}"
        link = os.path.join(tmp, name)
        os.symlink(binary, link)
        port, metrics = free_port(), free_port()
        url, metrics_url = f"http://127.0.0.1:{port}/webhooks/demo", f"http://127.0.0.1:{metrics}/metrics"
        env = dict(os.environ, HOOKONCE__SERVER__LISTEN=f"127.0.0.1:{port}",
                   HOOKONCE__SERVER__METRICS_LISTEN=f"127.0.0.1:{metrics}", RUST_LOG="info")
        daemon_log, reloader_log = os.path.join(tmp, "daemon.log"), os.path.join(tmp, "reloader.log")
        daemon = reloader = None
        try:
            with open(daemon_log, "w") as out:
                daemon = subprocess.Popen([link, "serve", "--config", served, "--log-format", "json"],
                                          env=env, stdout=subprocess.DEVNULL, stderr=out)

            def answers():
                try:
                    return applied_reloads(metrics_url) >= 0
                except OSError:
                    return False
            eventually("the daemon answers /metrics", answers, 60)
            assert deliver(binary, signer_new, url, body) == 401, "the new secret verified before the rotation"

            with open(args.script) as f:
                script = f.read()
            with open(reloader_log, "w") as out:
                reloader = subprocess.Popen([*args.shell, "-c", script], stdout=out, stderr=subprocess.STDOUT,
                                            env=dict(os.environ, WATCH_DIR=watched, INTERVAL="1", PROCESS_NAME=name))
            eventually("the reloader starts watching", lambda: "watching" in text(reloader_log))

            write_secret(watched, 2, {"GITHUB_WEBHOOK_SECRET": f"{OLD}\n{NEW}\n"})  # the overlap
            eventually("the reload of the overlap applies", lambda: applied_reloads(metrics_url) == 1)
            assert deliver(binary, signer_new, url, body) == 200, "the new secret is refused during the overlap"
            assert deliver(binary, signer_old, url, body) == 200, "the old secret is refused during the overlap"

            write_secret(watched, 3, {"GITHUB_WEBHOOK_SECRET": f"{NEW}\n"})  # the provider rolled over
            eventually("the reload without the old secret applies", lambda: applied_reloads(metrics_url) == 2)
            assert deliver(binary, signer_old, url, body) == 401, "the old secret still verifies after its removal"
            assert deliver(binary, signer_new, url, body) == 200, "the new secret is refused after the rotation"
            assert daemon.poll() is None, "the daemon exited"
            print(text(reloader_log), end="")
            print(f"{' '.join(args.shell)}: rotated without a restart (pid {daemon.pid}): 2 reloads applied")
        except AssertionError:
            show_logs(daemon_log, reloader_log)
            raise
        finally:
            stop(reloader, daemon)


if __name__ == "__main__":
    main()
