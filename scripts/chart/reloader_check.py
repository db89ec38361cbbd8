#!/usr/bin/env python3
"""Runs the chart's secrets-reloader script under a given shell against a stand-in daemon, for
scripts/test-chart, and fails unless it behaves as the chart promises.

  reloader_check.py SCRIPT SHELL [ARG...]    e.g. reloader_check.py reloader.sh busybox sh

The watched directory is laid out as the kubelet lays out a Secret volume: the files live in a
timestamped directory, `..data` links to it, and every key links to `..data/KEY`; an update
writes a new directory and swaps `..data` in one rename. The stand-in is a Python process whose
name (/proc/PID/comm) is unique to this run, so no other process on the machine can be signalled;
it starts without a SIGHUP handler (as a daemon still starting, or a build without reload, for
which SIGHUP is fatal) and installs one on SIGUSR1, counting the SIGHUPs it gets in a file.

Checked: no signal while the files are unchanged; a change while the stand-in does not handle
SIGHUP sends nothing (the stand-in lives) and stays pending; once it handles SIGHUP it gets
exactly one; a second change gets exactly one more.
"""

import os
import signal
import subprocess
import sys
import tempfile
import time

STAND_IN = r"""
import ctypes, signal, sys
name, counts = sys.argv[1], sys.argv[2]
ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME: /proc/PID/comm
def hup(*_):
    with open(counts, "a") as f:
        f.write("hup\n")
signal.signal(signal.SIGUSR1, lambda *_: signal.signal(signal.SIGHUP, hup))
print("ready", flush=True)
while True:
    signal.pause()
"""


def eventually(what, condition, seconds=15):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.05)


def write_secret(directory, generation, values):
    """One kubelet update: the files in a new directory, then `..data` swapped to it."""
    data = os.path.join(directory, f"..2026_01_01_00_00_0{generation}.000000000")
    os.mkdir(data)
    for key, value in values.items():
        with open(os.path.join(data, key), "w") as f:
            f.write(value)
        link = os.path.join(directory, key)
        if not os.path.islink(link):
            os.symlink(os.path.join("..data", key), link)
    os.symlink(os.path.basename(data), os.path.join(directory, "..data_tmp"))
    os.rename(os.path.join(directory, "..data_tmp"), os.path.join(directory, "..data"))


def main():
    script, shell = sys.argv[1], sys.argv[2:]
    with tempfile.TemporaryDirectory() as tmp:
        watched, counts, log = (os.path.join(tmp, n) for n in ("secrets", "hups", "reloader.log"))
        os.mkdir(watched)
        open(counts, "w").close()
        write_secret(watched, 1, {"STRIPE_WEBHOOK_SECRET": "whsec_old\n"})
        name = f"hkrl{os.getpid() % 100000}"
        stand_in = subprocess.Popen([sys.executable, "-c", STAND_IN, name, counts], stdout=subprocess.PIPE, text=True)
        reloader = None
        try:
            assert stand_in.stdout.readline().strip() == "ready", "the stand-in did not start"
            env = dict(os.environ, WATCH_DIR=watched, INTERVAL="1", PROCESS_NAME=name)
            with open(script) as f:
                body = f.read()
            with open(log, "w") as out:
                reloader = subprocess.Popen([*shell, "-c", body], env=env, stdout=out, stderr=subprocess.STDOUT)
            text = lambda: open(log).read()
            hups = lambda: len(open(counts).read().splitlines())
            eventually("the reloader starts watching", lambda: "watching" in text())

            # Unchanged files: three polls, nothing sent (an absence can only be waited for).
            time.sleep(3.2)
            assert stand_in.poll() is None and hups() == 0, f"signalled without a change:\n{text()}"

            write_secret(watched, 2, {"STRIPE_WEBHOOK_SECRET": "whsec_old\nwhsec_new\n"})
            eventually("the reloader sees the change and holds back", lambda: "does not handle SIGHUP" in text())
            assert stand_in.poll() is None, f"the stand-in was signalled before it handled SIGHUP:\n{text()}"
            assert hups() == 0

            stand_in.send_signal(signal.SIGUSR1)  # now it handles SIGHUP: the pending change goes out
            eventually("one SIGHUP for the pending change", lambda: hups() >= 1)
            time.sleep(2.2)  # two more polls: no second signal for the same content
            assert hups() == 1, f"{hups()} SIGHUPs for one change:\n{text()}"

            write_secret(watched, 3, {"STRIPE_WEBHOOK_SECRET": "whsec_new\n"})
            eventually("one more SIGHUP for the second change", lambda: hups() >= 2)
            time.sleep(2.2)
            assert hups() == 2, f"{hups()} SIGHUPs for two changes:\n{text()}"
            assert reloader.poll() is None, f"the reloader exited:\n{text()}"
            print(text(), end="")
            print(f"{' '.join(shell)}: 2 changes, 2 SIGHUPs, none before the stand-in handled SIGHUP")
        finally:
            for process in (reloader, stand_in):
                if process and process.poll() is None:
                    process.kill()
                    process.wait()


if __name__ == "__main__":
    main()
