"""What the chart's live checks (reloader_live.py, console_live.py) share: free ports, the
daemon's applied reloads, and showing the logs of a failed check and stopping its processes.
"""

import os
import signal
import socket
import subprocess
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def text(path):
    with open(path) as f:
        return f.read()


def applied_reloads(metrics_url):
    with urllib.request.urlopen(metrics_url, timeout=5) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith('hookonce_config_reloads_total{result="applied"}'):
                return int(float(line.split()[-1]))
    return 0


def show_logs(*paths):
    """Prints each log that exists, headed by its name: what a failed check leaves to read."""
    for path in paths:
        if os.path.exists(path):
            print(f"--- {os.path.basename(path)}\n{text(path)}")


def stop(reloader, daemon):
    """Ends the processes a check started (either may be None): the daemon by SIGTERM, as its
    orchestrator would, the reloader by SIGKILL; each waited for, and killed after 30 s."""
    for process in (reloader, daemon):
        if process and process.poll() is None:
            process.send_signal(signal.SIGTERM if process is daemon else signal.SIGKILL)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
