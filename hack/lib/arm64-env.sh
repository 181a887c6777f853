# shellcheck shell=bash
# The arm64 build of our binaries, in one place for the scripts that build
# or test it (hack/check-image-proxy.sh, hack/test.sh): Debian's
# gcc-aarch64-linux-gnu compiles the C dependencies (aws-lc, mimalloc) and
# links, as the Dockerfile's build stage does, and Debian's
# qemu-user-static runs what was built on this amd64 host.

# The Rust target of an arm64 node.
# shellcheck disable=SC2034 # used by the scripts that source this file
ARM64_TARGET=aarch64-unknown-linux-musl
# cargo's linker and the cc crate's compiler for that target.
# shellcheck disable=SC2034
ARM64_BUILD_ENV=(
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=aarch64-linux-gnu-gcc
  CC_aarch64_unknown_linux_musl=aarch64-linux-gnu-gcc
)
# What runs an arm64 executable here (cargo's runner for the target's tests).
# shellcheck disable=SC2034
ARM64_RUNNER=qemu-aarch64-static
