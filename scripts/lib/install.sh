# shellcheck shell=bash
# Installs what the project's scripts need when it is missing: Debian packages, Python venvs and
# npm trees (cached under target/), cargo subcommands. Sourced, not run, by scripts/test,
# scripts/test-chart (through scripts/chart/tools.sh), scripts/gen-fixtures, scripts/faults/* and
# bench/* (through bench/lib.sh).
#
# Every function is idempotent and reaches the network only when something has to be installed.
# Debian packages need root (CI and a fresh machine run as root); without it the functions stop
# with the apt-get command to run. All messages go to stderr, so callers may capture stdout.
#
#   need_command CMD PACKAGE          install Debian's PACKAGE unless CMD is on PATH (or /usr/sbin)
#   need_file PATH PACKAGE            install Debian's PACKAGE unless PATH exists
#   apt_install PACKAGE…              install Debian packages (apt-get update once per run)
#   ensure_venv DIR REQUIREMENTS [PIP ARGS…]
#                                     a venv in DIR holding REQUIREMENTS; rebuilt when that file or
#                                     the interpreter changes
#   ensure_npm_ci DIR PACKAGE_DIR     PACKAGE_DIR's package.json and package-lock.json installed
#                                     with `npm ci` in DIR; rebuilt when either or node changes
#   need_cargo_subcommand NAME CRATE  `cargo install --locked CRATE` unless `cargo NAME` runs
#                                     (CRATE may pin a version: cargo-deny@0.20.2)

# Debian keeps daemons' binaries (redis-server, nats-server's helpers, systemd tools) in /usr/sbin,
# which a non-login root shell may not have on PATH.
case ":$PATH:" in
  *:/usr/sbin:*) ;;
  *) export PATH="$PATH:/usr/sbin" ;;
esac

install_say() { printf '==> %s\n' "$*" >&2; }
install_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# apt_install PACKAGE… installs Debian packages, without their recommendations and without
# starting their services (a policy-rc.d that says 101, as in a container image build: only the
# binaries are wanted). The package lists are refreshed once per run, also across the scripts
# that one run starts (HOOKONCE_APT_UPDATED is exported).
apt_install() {
  command -v apt-get >/dev/null 2>&1 || install_die "apt-get not found: install the Debian package(s) $* by hand"
  if [ "$(id -u)" -ne 0 ]; then
    install_die "the Debian package(s) $* are needed: run this script as root, or first run: sudo apt-get install $*"
  fi
  if [ "${HOOKONCE_APT_UPDATED:-}" != 1 ]; then
    install_say "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || install_die "apt-get update failed"
    export HOOKONCE_APT_UPDATED=1
  fi
  install_say "apt-get install $*"
  local guard=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 0755 /usr/sbin/policy-rc.d
    guard=/usr/sbin/policy-rc.d
  fi
  local status=0
  # dpkg's progress goes to stdout and is dropped; errors still reach stderr.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null || status=$?
  [ -z "$guard" ] || rm -f "$guard"
  [ "$status" -eq 0 ] || install_die "apt-get install $* failed"
}

have_command() {
  command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/usr/bin/$1" ]
}

# need_command CMD PACKAGE installs Debian's PACKAGE when CMD is missing.
need_command() {
  have_command "$1" && return 0
  apt_install "$2"
  have_command "$1" || install_die "$1 is still missing after installing the Debian package $2"
}

# need_file PATH PACKAGE installs Debian's PACKAGE when PATH (a library, say) does not exist.
need_file() {
  [ -e "$1" ] && return 0
  apt_install "$2"
  [ -e "$1" ] || install_die "$1 is still missing after installing the Debian package $2"
}

# ensure_venv DIR REQUIREMENTS [PIP ARGS…] leaves in DIR a Python venv with the packages of the
# requirements file REQUIREMENTS (extra arguments go to pip install, e.g. --no-deps). It is rebuilt
# from scratch when the file or the interpreter's version changes, or when a build was cut short.
ensure_venv() {
  local dir=$1 requirements=$2 want have=""
  shift 2
  [ -f "$requirements" ] || install_die "no requirements file $requirements"
  need_command python3 python3
  want="$({ cat "$requirements"; python3 --version; } | sha256sum | cut -d' ' -f1)"
  [ -f "$dir/.requirements.sha256" ] && have=$(cat "$dir/.requirements.sha256")
  if [ "$want" = "$have" ] && [ -x "$dir/bin/python" ]; then
    return 0
  fi
  install_say "creating a Python venv in $dir from $requirements"
  rm -rf "$dir"
  mkdir -p "$(dirname "$dir")"
  if ! python3 -m venv "$dir" >/dev/null 2>&1; then
    # Debian ships the venv module (and ensurepip) separately.
    rm -rf "$dir"
    apt_install python3-venv
    python3 -m venv "$dir" >&2 || install_die "python3 -m venv $dir failed"
  fi
  "$dir/bin/pip" install --quiet --disable-pip-version-check "$@" -r "$requirements" >&2 \
    || install_die "pip install -r $requirements failed"
  echo "$want" >"$dir/.requirements.sha256"
}

# ensure_npm_ci DIR PACKAGE_DIR leaves DIR/node_modules as `npm ci` makes it from PACKAGE_DIR's
# package.json and package-lock.json (copied into DIR); rebuilt when either file or node changes.
ensure_npm_ci() {
  local dir=$1 spec=$2 want have=""
  if [ ! -f "$spec/package.json" ] || [ ! -f "$spec/package-lock.json" ]; then
    install_die "$spec lacks package.json or package-lock.json"
  fi
  need_command npm npm
  need_command node nodejs
  want="$({ cat "$spec/package.json" "$spec/package-lock.json"; node --version; } | sha256sum | cut -d' ' -f1)"
  [ -f "$dir/.package-lock.sha256" ] && have=$(cat "$dir/.package-lock.sha256")
  if [ "$want" = "$have" ] && [ -d "$dir/node_modules" ]; then
    return 0
  fi
  install_say "npm ci in $dir from $spec/package-lock.json"
  rm -rf "$dir"
  mkdir -p "$dir"
  cp "$spec/package.json" "$spec/package-lock.json" "$dir/"
  (cd "$dir" && npm ci --silent --no-audit --no-fund >&2) || install_die "npm ci in $dir failed"
  echo "$want" >"$dir/.package-lock.sha256"
}

# need_cargo_subcommand NAME CRATE installs CRATE from crates.io when `cargo NAME` does not run.
need_cargo_subcommand() {
  cargo "$1" --version >/dev/null 2>&1 && return 0
  install_say "cargo install --locked $2"
  cargo install --locked "$2" >&2 || install_die "cargo install $2 failed"
}
