# syntax=docker/dockerfile:1
#
# hookonce container image: a production build (the release profile with link-time optimisation
# and one codegen unit, Cargo.toml's `[profile.production]`) on the Rust image, copied onto
# distroless "cc" (glibc, libgcc, libssl3 for the Kafka sink's TLS, CA certificates and nothing
# else: no shell, no package manager), running as uid 65532.
#
#   docker build -t hookonce:dev .
#   docker run --rm -p 8080:8080 -p 9090:9090 -v "$PWD/hookonce.toml:/etc/hookonce/hookonce.toml:ro" hookonce:dev
#
# The configuration is read from /etc/hookonce/hookonce.toml (the Helm chart mounts its ConfigMap
# there); secrets come from the environment (env:NAME) or mounted files (file:/path).

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
WORKDIR /src
# The Kafka sink's librdkafka is built from the sources bundled in rdkafka-sys (its configure,
# make, and a Python script that writes a linker script) and linked statically; it uses the
# system's OpenSSL (libssl-dev here, libssl3 at run time, which the distroless "cc" image has).
RUN apt-get update \
 && apt-get install -y --no-install-recommends make pkg-config libssl-dev python3 \
 && rm -rf /var/lib/apt/lists/*
# Dependencies first: this layer is rebuilt only when a manifest or the lock file changes. The
# workspace's other members need their manifests for cargo to read the workspace: the load
# generator (not built here) and crates/sha256-pair (a dependency of the daemon).
COPY Cargo.toml Cargo.lock ./
COPY tools/loadgen/Cargo.toml tools/loadgen/
COPY crates/sha256-pair/Cargo.toml crates/sha256-pair/
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    cargo fetch --locked
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --profile production --locked --bin hookonce \
 && install -D -m 0755 target/production/hookonce /out/hookonce \
 && /out/hookonce --version

FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="hookonce" \
      org.opencontainers.image.description="Verify, deduplicate and forward webhooks exactly once into Redis Streams" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/hookonce /usr/local/bin/hookonce
# The distroless "nonroot" user, numeric so Kubernetes can verify runAsNonRoot.
USER 65532:65532
# 8080: POST /webhooks/{source}, /healthz, /readyz. 9090: /metrics.
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/hookonce"]
CMD ["serve", "--config", "/etc/hookonce/hookonce.toml"]
