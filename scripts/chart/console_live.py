#!/usr/bin/env python3
"""Runs a live `hookonce serve` with the chart's rendered [console] and its token files laid out as
the kubelet lays out the mounted Secret, beside the chart's rendered reloader, for
scripts/test-chart; fails unless the tokens authenticate as the chart promises and a rotated
operator token is taken into use without a restart.

  console_live.py --bin BIN --mount MOUNT --rendered RENDERED.yaml --reloader SCRIPT SHELL [ARG...]

The daemon gets the rendered [console] table as it is (its token references rewritten from MOUNT
to a local directory), beside a memory store, a stdout sink and one source; only the listeners
move to free loopback ports (HOOKONCE__CONSOLE__LISTEN and the server's, as environment
overrides). The Secret's values are those of the chart's rendered Secret; every env: token gets its
value from it too. Checked through the API: no token is 401, a wrong one 401; each viewer token
reads (200) and may not write (403); the operator token reads. Then the operator token's key is
rotated in the Secret (a kubelet-style swap of `..data`), the reloader signals, and: the old
operator token is 401, the new one 200, the viewer tokens still 200, and the daemon's PID never
changed (`hookonce_config_reloads_total{result="applied"}` is 1).
"""

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
import tomllib
import urllib.error
import urllib.request

import yaml

from live import applied_reloads, free_port, show_logs, stop, text
from reloader_check import eventually, write_secret

ROTATED = "rotated-operator-token-5d41402abc4b2a76b9719d911017c592"


def status(method, url, token=None):
    request = urllib.request.Request(url, method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def toml_value(value):
    # Strings, integers and lists of strings: their JSON is valid TOML.
    return json.dumps(value)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--mount", required=True)
    parser.add_argument("--rendered", required=True)
    parser.add_argument("--reloader", required=True)
    parser.add_argument("shell", nargs="+")
    args = parser.parse_args()
    binary = os.path.abspath(args.bin)
    with open(args.rendered) as f:
        docs = [doc for doc in yaml.safe_load_all(f) if doc]
    config_map = [d for d in docs if d["kind"] == "ConfigMap" and "hookonce.toml" in d.get("data", {})]
    secret = [d for d in docs if d["kind"] == "Secret"]
    assert len(config_map) == 1 and len(secret) == 1, "expected the chart's ConfigMap and Secret"
    data = {k: base64.b64decode(v).decode() for k, v in secret[0]["data"].items()}
    console = tomllib.loads(config_map[0]["data"]["hookonce.toml"])["console"]
    refs = {key: console.get(key, []) for key in ("viewer_tokens", "operator_tokens")}
    assert all(r.startswith(("file:", "env:")) for rs in refs.values() for r in rs), refs

    def value_of(ref):  # what the pod would read: the Secret's key, as a file or an env var
        return data[os.path.basename(ref[5:]) if ref.startswith("file:") else ref[4:]]

    viewers = [value_of(r) for r in refs["viewer_tokens"]]
    operator_ref = refs["operator_tokens"][0]
    assert operator_ref.startswith(f"file:{args.mount}/"), f"the operator token is not a file of the mount: {operator_ref}"
    operator_key, operator = os.path.basename(operator_ref), value_of(operator_ref)
    assert viewers and operator, "the rendered console needs viewer and operator tokens"

    with tempfile.TemporaryDirectory() as tmp:
        watched = os.path.join(tmp, "secrets")
        os.mkdir(watched)
        write_secret(watched, 1, data)
        lines = [f"{key} = {toml_value(value)}" for key, value in console.items()]
        served = os.path.join(tmp, "served.toml")
        with open(served, "w") as f:
            f.write(f"""[store]
backend = "memory"
[sink]
kind = "stdout"
[sources.demo]
provider = "github"
secrets = ["not-a-real-secret"]
[console]
""" + "\n".join(lines).replace(f"file:{args.mount}/", f"file:{watched}/") + "\n")
        name = f"hkcl{os.getpid() % 100000}"
        link = os.path.join(tmp, name)
        os.symlink(binary, link)
        port, metrics, console_port = free_port(), free_port(), free_port()
        base, metrics_url = f"http://127.0.0.1:{console_port}", f"http://127.0.0.1:{metrics}/metrics"
        env = dict(os.environ, HOOKONCE__SERVER__LISTEN=f"127.0.0.1:{port}",
                   HOOKONCE__SERVER__METRICS_LISTEN=f"127.0.0.1:{metrics}",
                   HOOKONCE__CONSOLE__LISTEN=f"127.0.0.1:{console_port}", RUST_LOG="info")
        env.update({r[4:]: data[r[4:]] for rs in refs.values() for r in rs if r.startswith("env:")})
        daemon_log, reloader_log = os.path.join(tmp, "daemon.log"), os.path.join(tmp, "reloader.log")
        daemon = reloader = None
        overview, write = f"{base}/api/v1/overview", f"{base}/api/v1/dead-letters/none/0-0"
        try:
            with open(daemon_log, "w") as out:
                daemon = subprocess.Popen([link, "serve", "--config", served, "--log-format", "json"],
                                          env=env, stdout=subprocess.DEVNULL, stderr=out)

            def answers():
                try:
                    return status("GET", overview) > 0
                except OSError:
                    return False
            eventually("the console answers", answers, 60)
            assert status("GET", overview) == 401, "the API answers without a token"
            assert status("GET", overview, "not-a-token") == 401, "the API answers a wrong token"
            for i, token in enumerate(viewers):
                assert status("GET", overview, token) == 200, f"viewer token {i} ({refs['viewer_tokens'][i]}) cannot read"
                assert status("DELETE", write, token) == 403, f"viewer token {i} may write"
            assert status("GET", overview, operator) == 200, "the operator token cannot read"
            assert status("GET", overview, ROTATED) == 401, "the next operator token works before the rotation"

            with open(args.reloader) as f:
                script = f.read()
            with open(reloader_log, "w") as out:
                reloader = subprocess.Popen([*args.shell, "-c", script], stdout=out, stderr=subprocess.STDOUT,
                                            env=dict(os.environ, WATCH_DIR=watched, INTERVAL="1", PROCESS_NAME=name))
            eventually("the reloader starts watching", lambda: "watching" in text(reloader_log))
            write_secret(watched, 2, dict(data, **{operator_key: f"{ROTATED}\n"}))
            eventually("the reload of the rotated token applies", lambda: applied_reloads(metrics_url) == 1)
            assert status("GET", overview, operator) == 401, "the rotated-out operator token still works"
            assert status("GET", overview, ROTATED) == 200, "the new operator token is refused"
            for i, token in enumerate(viewers):
                assert status("GET", overview, token) == 200, f"viewer token {i} stopped working after the rotation"
            assert daemon.poll() is None, "the daemon exited"
            print(text(reloader_log), end="")
            print(f"console: {len(viewers)} viewer tokens ({', '.join(refs['viewer_tokens'])}) read and may not write; "
                  f"{operator_ref} rotated without a restart (pid {daemon.pid}), the old token refused")
        except AssertionError:
            show_logs(daemon_log, reloader_log)
            raise
        finally:
            stop(reloader, daemon)


if __name__ == "__main__":
    sys.exit(main())
