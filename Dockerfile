# syntax=docker/dockerfile:1
# One image for the controller and the node proxy.
FROM --platform=$BUILDPLATFORM rust:1.95-bookworm AS build
ARG TARGETARCH
WORKDIR /src
COPY . .
RUN case "$TARGETARCH" in \
      amd64) target=x86_64-unknown-linux-musl ;; \
      arm64) target=aarch64-unknown-linux-musl; apt-get update && apt-get install -y gcc-aarch64-linux-gnu ;; \
      *) echo "unsupported arch $TARGETARCH" >&2; exit 1 ;; \
    esac \
 && apt-get update && apt-get install -y musl-tools \
 && rustup target add "$target" \
 && CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=aarch64-linux-gnu-gcc \
    cargo build --release --locked --target "$target" --bin hcp-ingress \
 && cp "target/$target/release/hcp-ingress" /hcp-ingress

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /hcp-ingress /hcp-ingress
USER 65532:65532
ENTRYPOINT ["/hcp-ingress"]
CMD ["controller"]
