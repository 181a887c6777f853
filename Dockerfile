# syntax=docker/dockerfile:1
# One image for the controller and the node proxy: static (musl) binaries on
# distroless/static, non-root. Multi-arch: build with
#   docker buildx build --platform linux/amd64,linux/arm64 .
# (hack/build-image.sh). The build stage runs on the builder's own platform
# and cross-compiles for TARGETARCH, so no emulation is needed. Without
# Docker, hack/build-image-tarball.sh builds the final stage as an OCI
# tarball per platform and hack/build-image-index.sh the index of both: what
# CI tests and the release workflow pushes. test/release/image.rs keeps
# this file and that tarball equal.

FROM --platform=$BUILDPLATFORM rust:1.95-bookworm AS build
ARG TARGETARCH
ARG BUILDARCH
# The version hack/install-tool.sh pins (test/release compares them).
ARG CARGO_AUDITABLE_VERSION=0.7.7
WORKDIR /src
RUN set -eux; \
    case "$TARGETARCH" in \
      amd64) target=x86_64-unknown-linux-musl;  gnu=x86_64-linux-gnu;  pkg="gcc-x86-64-linux-gnu libc6-dev-amd64-cross" ;; \
      arm64) target=aarch64-unknown-linux-musl; gnu=aarch64-linux-gnu; pkg="gcc-aarch64-linux-gnu libc6-dev-arm64-cross" ;; \
      *) echo "unsupported TARGETARCH=$TARGETARCH (amd64, arm64)" >&2; exit 1 ;; \
    esac; \
    apt-get update; \
    apt-get install -y --no-install-recommends musl-tools; \
    if [ "$TARGETARCH" != "$BUILDARCH" ]; then apt-get install -y --no-install-recommends $pkg; fi; \
    rm -rf /var/lib/apt/lists/*; \
    rustup target add "$target"; \
    echo "$target" > /target; echo "$gnu" > /gnu
# cargo auditable embeds the dependency list in each binary (section
# .dep-v0), where image scanners (Trivy, Grype, Syft) read what a Rust
# binary was built from; docs/release.md.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    cargo install --locked --version "$CARGO_AUDITABLE_VERSION" cargo-auditable
COPY . .
# The commit's time, when the build passes it (the release workflow does):
# gcc writes it for __DATE__ and __TIME__ (mimalloc prints its build time),
# so the same commit builds the same binaries.
ARG SOURCE_DATE_EPOCH
# C code of dependencies (aws-lc) is built with the target's gcc and its
# libc headers (libc6-dev-*-cross: without them C dependencies do not
# compile for another architecture); Rust's musl targets link their own
# musl, so the gnu cross gcc works as linker.
# Each binary in a cargo run of its own package (hack/check-image-proxy.sh):
# built in one run, the node proxy would link what the controller's features
# turn on in shared crates. crates/proxy depends on no Kubernetes crate, so
# the node binary's dependency list (.dep-v0) names none.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    set -eux; \
    target="$(cat /target)"; gnu="$(cat /gnu)"; \
    if [ "$TARGETARCH" != "$BUILDARCH" ]; then \
      upper="$(echo "$target" | tr 'a-z-' 'A-Z_')"; \
      export "CARGO_TARGET_${upper}_LINKER=${gnu}-gcc" "CC_$(echo "$target" | tr '-' '_')=${gnu}-gcc"; \
    fi; \
    cargo auditable build --release --locked --target "$target" -p hcp-ingress-proxy --bin hcp-ingress-proxy; \
    cargo auditable build --release --locked --target "$target" -p hcp-ingress --bin hcp-ingress; \
    cp "target/$target/release/hcp-ingress" "target/$target/release/hcp-ingress-proxy" /

FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.title="hcp-ingress" \
      org.opencontainers.image.description="Cluster API add-on provider: hosted control planes behind one shared SNI-passthrough ingress" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/hcp-ingress/hcp-ingress"
COPY --from=build /hcp-ingress /hcp-ingress
# The node proxy alone (what the DaemonSet runs): a fraction of the memory.
COPY --from=build /hcp-ingress-proxy /hcp-ingress-proxy
USER 65532:65532
ENTRYPOINT ["/hcp-ingress"]
CMD ["controller"]
