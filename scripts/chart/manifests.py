#!/usr/bin/env python3
"""Pulls pieces out of `helm template` output (read on stdin) for scripts/test-chart.

  manifests.py core OUT.yaml KIND...  writes the documents of Kubernetes' own kinds to OUT.yaml
                                      (CRD kinds are left out) and fails unless every KIND is there
  manifests.py rules OUT.yaml         writes the PrometheusRule's spec as a plain Prometheus rules file
  manifests.py toml OUT.toml          writes the daemon's TOML from the chart's ConfigMap
  manifests.py secret-env             prints NAME for each env var the Deployments (webhook, relay) read from a Secret
"""

import sys

import yaml

CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}


def documents():
    return [doc for doc in yaml.safe_load_all(sys.stdin) if doc]


def the_one(docs, kind, predicate=lambda doc: True):
    found = [doc for doc in docs if doc.get("kind") == kind and predicate(doc)]
    if len(found) != 1:
        sys.exit(f"FAIL: expected one {kind} in the rendering, found {len(found)}")
    return found[0]


def is_hookonce(doc):
    return doc["metadata"]["labels"].get("app.kubernetes.io/name") == "hookonce"


def is_relay(doc):
    return doc["metadata"]["labels"].get("app.kubernetes.io/component") == "relay"


def main():
    command, args = sys.argv[1], sys.argv[2:]
    docs = documents()
    if command == "core":
        core = [doc for doc in docs if doc.get("kind") not in CRD_KINDS]
        kinds = {doc["kind"] for doc in core}
        missing = sorted(set(args[1:]) - kinds)
        if missing:
            sys.exit(f"FAIL: the rendering lacks {', '.join(missing)}")
        with open(args[0], "w") as f:
            yaml.safe_dump_all(core, f, sort_keys=False)
        print(" ".join(f"{doc['kind']}/{doc['metadata']['name']}" for doc in core))
    elif command == "rules":
        rule = the_one(docs, "PrometheusRule")
        with open(args[0], "w") as f:
            yaml.safe_dump({"groups": rule["spec"]["groups"]}, f, sort_keys=False)
    elif command == "toml":
        config = the_one(docs, "ConfigMap", lambda doc: "hookonce.toml" in doc.get("data", {}))
        with open(args[0], "w") as f:
            f.write(config["data"]["hookonce.toml"])
    elif command == "secret-env":
        # The webhook Deployment, and the relay's when it has one of its own.
        the_one(docs, "Deployment", lambda doc: is_hookonce(doc) and not is_relay(doc))
        names = set()
        for deployment in (doc for doc in docs if doc.get("kind") == "Deployment" and is_hookonce(doc)):
            for container in deployment["spec"]["template"]["spec"]["containers"]:
                for env in container.get("env", []):
                    if "secretKeyRef" in env.get("valueFrom", {}):
                        names.add(env["name"])
        for name in sorted(names):
            print(name)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
