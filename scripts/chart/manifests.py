#!/usr/bin/env python3
"""Pulls pieces out of `helm template` output (read on stdin) for scripts/test-chart.

  manifests.py core OUT.yaml KIND...  writes the documents of Kubernetes' own kinds to OUT.yaml
                                      (CRD kinds are left out) and fails unless every KIND is there
  manifests.py rules OUT.yaml         writes the PrometheusRule's spec as a plain Prometheus rules file
  manifests.py toml OUT.toml          writes the daemon's TOML from the chart's ConfigMap
  manifests.py secret-env             prints NAME for each env var the Deployments (webhook, relay) read from a Secret
  manifests.py secret-mount MOUNT on|off
                                      fails unless every hookonce Deployment mounts the Secret as a whole
                                      directory at MOUNT (read-only, no subPath), with (on) or without
                                      (off) the reloader sidecar and its shared process namespace
  manifests.py secret-paths MOUNT     fails unless every secrets_files and file: path of the rendered
                                      configuration is MOUNT/KEY, KEY a key of the chart's Secret if it
                                      renders one; prints the paths
  manifests.py secret-local MOUNT DIR OUT.toml
                                      writes the daemon's TOML with MOUNT replaced by DIR, and DIR/KEY for
                                      every file it references in MOUNT: the rendered Secret's value, or a
                                      dummy secret when the Secret is not the chart's
  manifests.py reloader-script OUT.sh writes the reloader sidecar's script
  manifests.py console PORT off|on|open|closed
                                      off: no [console], console port, Service or NetworkPolicy rule;
                                      on: [console] listens on 0.0.0.0:PORT, the webhook pods' container
                                      port "console", one ClusterIP Service of its own, no Ingress to it;
                                      open/closed: also a NetworkPolicy with (open) or without (closed)
                                      a rule for the console port. Readiness stays on port http.
"""

import base64
import os
import sys
import tomllib

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


def deployments(docs):
    """The webhook Deployment and, when there is one, the relay's."""
    the_one(docs, "Deployment", lambda doc: is_hookonce(doc) and not is_relay(doc))
    return [doc for doc in docs if doc.get("kind") == "Deployment" and is_hookonce(doc)]


def config_toml(docs):
    config = the_one(docs, "ConfigMap", lambda doc: "hookonce.toml" in doc.get("data", {}))
    return config["data"]["hookonce.toml"]


def chart_secret_data(docs):
    """The chart's own Secret's keys and values, or None when it renders none (existingSecret)."""
    secrets = [doc for doc in docs if doc.get("kind") == "Secret" and is_hookonce(doc)]
    if not secrets:
        return None
    return {key: base64.b64decode(value).decode() for key, value in secrets[0].get("data", {}).items()}


def secret_file_paths(toml_text):
    """(where, path) of every secret the configuration reads from a file."""
    config = tomllib.loads(toml_text)
    found = []
    for name, source in config.get("sources", {}).items():
        found += [(f"sources.{name}.secrets_files", path) for path in source.get("secrets_files", [])]
        found += [(f"sources.{name}.secrets", s[5:]) for s in source.get("secrets", []) if s.startswith("file:")]
    console = config.get("console", {})
    for key in ("viewer_tokens", "operator_tokens"):
        tokens = console.get(key, [])
        tokens = [tokens] if isinstance(tokens, str) else tokens
        found += [(f"console.{key}[{i}]", s[5:]) for i, s in enumerate(tokens) if s.startswith("file:")]
    for name, route in config.get("relay", {}).get("routes", {}).items():
        for header, value in route.get("headers", {}).items():
            if value.startswith("file:"):
                found.append((f"relay.routes.{name}.headers.{header}", value[5:]))
        if route.get("signing_secret", "").startswith("file:"):
            found.append((f"relay.routes.{name}.signing_secret", route["signing_secret"][5:]))
    return found


def check_secret_mount(docs, mount, reloader):
    for deployment in deployments(docs):
        name = deployment["metadata"]["name"]
        pod = deployment["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        volume = volumes.get("secret-files")
        assert volume and "secret" in volume, f"{name}: no secret volume secret-files"
        assert "items" not in volume["secret"], f"{name}: the Secret volume lists items; every key must be a file"
        own = [doc["metadata"]["name"] for doc in docs if doc.get("kind") == "Secret" and is_hookonce(doc)]
        assert not own or volume["secret"]["secretName"] == own[0], \
            f"{name}: mounts Secret {volume['secret']['secretName']}, the chart's is {own[0]}"
        containers = {c["name"]: c for c in pod["containers"]}
        daemon = pod["containers"][0]
        assert daemon["name"] in ("hookonce", "relay"), f"{name}: first container is {daemon['name']}"
        for container in pod["containers"]:
            for m in container.get("volumeMounts", []):
                assert m["name"] != "secret-files" or not {"subPath", "subPathExpr"} & m.keys(), \
                    f"{name}: {container['name']} mounts the Secret with subPath: Kubernetes would never update it"
        mounts = [m for m in daemon["volumeMounts"] if m["name"] == "secret-files"]
        assert len(mounts) == 1 and mounts[0]["mountPath"] == mount and mounts[0].get("readOnly"), \
            f"{name}: the daemon does not mount secret-files read-only at {mount}: {mounts}"
        annotations = deployment["spec"]["template"]["metadata"].get("annotations", {})
        sidecar = containers.get("secrets-reloader")
        if reloader == "on":
            assert pod.get("shareProcessNamespace") is True, f"{name}: the reloader needs shareProcessNamespace"
            assert sidecar, f"{name}: no secrets-reloader container"
            env = {e["name"]: e.get("value") for e in sidecar.get("env", [])}
            assert env.get("WATCH_DIR") == mount, f"{name}: the reloader watches {env.get('WATCH_DIR')}, not {mount}"
            assert [m for m in sidecar["volumeMounts"] if m["name"] == "secret-files" and m["mountPath"] == mount
                    and "subPath" not in m], f"{name}: the reloader does not mount the Secret at {mount}"
            assert "checksum/secret" not in annotations, f"{name}: checksum/secret would restart pods the reloader reloads"
        else:
            assert not sidecar and not pod.get("shareProcessNamespace"), f"{name}: a reloader while it is off"
        print(f"{name}: Secret {volume['secret']['secretName']} at {mount}, reloader {reloader}")


def check_console(docs, port, expected):
    """The console on (its listener, container port and Service) or off (no trace of it)."""
    config = tomllib.loads(config_toml(docs))
    webhook = the_one(docs, "Deployment", lambda doc: is_hookonce(doc) and not is_relay(doc))
    daemon = webhook["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in daemon.get("ports", [])}
    services = [doc for doc in docs if doc.get("kind") == "Service"
                and doc["metadata"]["labels"].get("app.kubernetes.io/component") == "console"]
    policies = [doc for doc in docs if doc.get("kind") == "NetworkPolicy"]
    console_rules = [rule for policy in policies for rule in policy["spec"].get("ingress", [])
                     if any(p.get("port") == "console" for p in rule.get("ports", []))]
    for kind in ("Deployment", "Service"):
        for doc in docs:
            if doc.get("kind") == kind and doc["metadata"]["labels"].get("app.kubernetes.io/component") == "relay":
                spec = doc["spec"]["template"]["spec"]["containers"] if kind == "Deployment" else [doc["spec"]]
                assert not [p for c in spec for p in c.get("ports", []) if p.get("name") == "console"], \
                    f"{kind} {doc['metadata']['name']}: the relay has a console port"
    # Readiness is the webhook listener's, whatever the console does.
    assert daemon["readinessProbe"]["httpGet"]["port"] == "http", f"readiness on {daemon['readinessProbe']}"
    if expected == "off":
        assert "console" not in config, f"[console] in the configuration: {config.get('console')}"
        assert "console" not in ports, f"container port console: {ports}"
        assert not services, f"console Service: {[s['metadata']['name'] for s in services]}"
        assert not console_rules, f"NetworkPolicy rule for the console: {console_rules}"
        print("no [console], no console port, Service or NetworkPolicy rule")
        return
    console = config.get("console")
    assert console, "no [console] in the configuration"
    assert console.get("listen") == f"0.0.0.0:{port}", f"console.listen = {console.get('listen')}"
    assert ports.get("console") == int(port), f"container port console: {ports}"
    assert len(services) == 1, f"expected one console Service, found {len(services)}"
    service = services[0]
    assert service["metadata"]["name"].endswith("-console"), service["metadata"]["name"]
    assert service["spec"]["type"] == "ClusterIP", f"console Service type {service['spec']['type']}"
    assert service["spec"]["selector"] == webhook["spec"]["selector"]["matchLabels"], "console Service selects other pods"
    assert service["spec"]["ports"] == [{"name": "console", "port": int(port), "targetPort": "console", "protocol": "TCP"}], \
        f"console Service ports {service['spec']['ports']}"
    webhook_services = [doc for doc in docs if doc.get("kind") == "Service" and doc is not service
                        and doc["spec"].get("selector") == service["spec"]["selector"]]
    for other in webhook_services:
        assert not [p for p in other["spec"]["ports"] if p.get("targetPort") == "console"], \
            f"Service {other['metadata']['name']} also exposes the console"
    for ingress in (doc for doc in docs if doc.get("kind") == "Ingress"):
        for rule in ingress["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                assert path["backend"]["service"]["name"] != service["metadata"]["name"], "an Ingress routes to the console"
    if expected in ("open", "closed"):
        assert len(policies) == 1, f"expected one NetworkPolicy, found {len(policies)}"
    if expected == "closed":
        assert not console_rules, f"the NetworkPolicy opens the console with consoleFrom empty: {console_rules}"
    elif expected == "open":
        assert len(console_rules) == 1 and console_rules[0].get("from"), \
            f"the NetworkPolicy should open the console to consoleFrom only: {console_rules}"
    secrets = [p for _, p in secret_file_paths(config_toml(docs)) if _.startswith("console.")]
    print(f"[console] listen {console['listen']}, Service {service['metadata']['name']}:{port}, "
          f"token files {secrets}, NetworkPolicy rules for the console: {len(console_rules)}")


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
    elif command == "secret-mount":
        check_secret_mount(docs, args[0], args[1])
    elif command == "secret-paths":
        mount, data = args[0], chart_secret_data(docs)
        paths = secret_file_paths(config_toml(docs))
        assert any(where.endswith(".secrets_files") for where, _ in paths), "no secrets_files in the configuration"
        for where, path in paths:
            assert os.path.dirname(path) == mount, f"{where} = {path}: not a file of the mount {mount}"
            key = os.path.basename(path)
            assert data is None or key in data, f"{where} = {path}: the chart's Secret has no key {key}"
            print(f"{where}: {path}")
    elif command == "secret-local":
        mount, local, out = args
        text, data = config_toml(docs), chart_secret_data(docs) or {}
        os.makedirs(local, exist_ok=True)
        for _, path in secret_file_paths(text):
            if os.path.dirname(path) == mount:
                key = os.path.basename(path)
                # Base64 after whsec_ satisfies the Standard Webhooks scheme; any string suits the others.
                with open(os.path.join(local, key), "w") as f:
                    f.write(data.get(key, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n"))
        with open(out, "w") as f:
            f.write(text.replace(f"{mount}/", f"{local}/"))
    elif command == "console":
        check_console(docs, args[0], args[1])
    elif command == "reloader-script":
        sidecar = [c for d in deployments(docs) for c in d["spec"]["template"]["spec"]["containers"]
                   if c["name"] == "secrets-reloader"]
        assert sidecar, "no secrets-reloader container"
        with open(args[0], "w") as f:
            f.write(sidecar[0]["args"][0])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
