#!/usr/bin/env bash
# Builds gangway-k8s's container image FROM scratch, with nothing but the
# Rust toolchain, Debian's musl-tools and the Go module proxy (no base image,
# no registry, no container engine):
#
#   1. a static release binary (x86_64-unknown-linux-musl; ring's C code
#      compiled by musl-gcc);
#   2. umoci (github.com/opencontainers/umoci, pinned by this folder's go.sum)
#      writes an OCI image layout: one layer holding /gangway-k8s, entrypoint
#      /gangway-k8s, user 65532 (non-root), fixed timestamps;
#   3. the layout is tarred into an OCI archive:
#        target/image/gangway-k8s-<version>.oci.tar
#      which `podman load -i`, `docker load -i` (Docker 25+), `ctr images
#      import`, `kind load image-archive` and `skopeo copy oci-archive:` take;
#      it loads as gangway-k8s:<version>, the image manifests/deployment.yaml
#      names.
#
# Prints the archive's path on its last line (GANGWAY_K8S_IMAGE for the
# tests). GANGWAY_K8S_BINARY=path skips step 1 and packs that binary.
# umoci is built once per go.sum into
# ${GANGWAY_K8S_CACHE:-~/.cache/gangway-k8s}/tools/<sha256 of go.sum>/.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
export PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null || { echo "image/build.sh: no go in PATH or /usr/local/go/bin" >&2; exit 1; }

version="$(cargo pkgid --manifest-path "$root/Cargo.toml" -p gangway-k8s | sed 's/.*[#@]//')"
target="x86_64-unknown-linux-musl"

# 1. The static binary.
binary="${GANGWAY_K8S_BINARY:-}"
if [ -z "$binary" ]; then
  command -v musl-gcc >/dev/null || { echo "image/build.sh: musl-gcc is needed (Debian: musl-tools)" >&2; exit 1; }
  rustup target add "$target" >&2
  (cd "$root" && CC_x86_64_unknown_linux_musl=musl-gcc \
    cargo build --release --target "$target" -p gangway-k8s --bin gangway-k8s >&2)
  binary="$root/target/$target/release/gangway-k8s"
fi
[ -x "$binary" ] || { echo "image/build.sh: $binary is not an executable" >&2; exit 1; }

# 2. umoci, once per go.sum.
key="$(sha256sum "$here/go.sum" | cut -c1-16)"
tools="${GANGWAY_K8S_CACHE:-$HOME/.cache/gangway-k8s}/tools/$key"
umoci="$tools/umoci"
if [ ! -x "$umoci" ]; then
  mkdir -p "$tools"
  (cd "$here" && CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly -buildvcs=false" \
    go build -ldflags="-s -w" -o "$umoci.tmp" github.com/opencontainers/umoci/cmd/umoci)
  mv "$umoci.tmp" "$umoci"
fi

# 3. The OCI layout, then the archive.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
install -m 0755 "$binary" "$work/gangway-k8s"
# No debug info in the image (symbols stay: a panic's backtrace names its
# functions); profile with the binary of target/ instead.
if command -v objcopy >/dev/null; then objcopy --strip-debug "$work/gangway-k8s"; fi
epoch="1970-01-01T00:00:00Z"
image="$work/layout:$version"
"$umoci" init --layout "$work/layout"
"$umoci" new --image "$image"
"$umoci" insert --image "$image" --history.created "$epoch" \
  --history.created_by "host-examples/k8s/image/build.sh" "$work/gangway-k8s" /gangway-k8s
"$umoci" config --image "$image" --created "$epoch" --history.created "$epoch" \
  --history.created_by "host-examples/k8s/image/build.sh" \
  --os linux --architecture amd64 \
  --config.entrypoint /gangway-k8s --config.cmd run \
  --config.user 65532:65532 \
  --config.env GANGWAY_MODULE_CACHE=off \
  --config.label "org.opencontainers.image.title=gangway-k8s" \
  --config.label "org.opencontainers.image.version=$version"
"$umoci" gc --layout "$work/layout"
# The name container engines load it as (Docker and containerd read it
# from the index).
python3 - "$work/layout/index.json" "$version" <<'PY'
import json, sys
path, version = sys.argv[1], sys.argv[2]
index = json.load(open(path))
for m in index["manifests"]:
    m.setdefault("annotations", {})["io.containerd.image.name"] = f"docker.io/library/gangway-k8s:{version}"
json.dump(index, open(path, "w"), separators=(",", ":"))
PY
out="$root/target/image"
mkdir -p "$out"
archive="$out/gangway-k8s-$version.oci.tar"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
  -C "$work/layout" -cf "$archive.tmp" .
mv "$archive.tmp" "$archive"
echo "image/build.sh: gangway-k8s:$version, $(du -h "$archive" | cut -f1), in $archive" >&2
echo "$archive"
