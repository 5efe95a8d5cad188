#!/usr/bin/env bash
# Builds the baton container image (baton-node and baton) FROM scratch, pulling nothing: the
# two binaries and exactly the shared libraries `ldd` lists for them (the dynamic loader
# included, at their absolute paths) go into a temporary build context with
# deploy/image/Dockerfile, and `docker build` makes the image from that alone.
#
#   deploy/image/build.sh                          cargo build --release, then image baton:dev
#   deploy/image/build.sh --profile debug --tag baton:debug
#   deploy/image/build.sh --no-cargo               take target/<profile>/ as it is
#   BATON_BIN_DIR=target/debug deploy/image/build.sh --tag baton:test   (implies --no-cargo)
#
# Prints "<tag> <image id>" on stdout as its last line; the build's output goes to stderr.
# Needs docker (a reachable daemon) and ldd; cargo unless --no-cargo or BATON_BIN_DIR.
# The image holds the build host's glibc, so build on a host whose glibc is 2.34 or newer
# (host-name lookups need no NSS modules then; Debian 12 has 2.36).
set -euo pipefail
trap 'echo "build.sh: error: line $LINENO: \"$BASH_COMMAND\" failed" >&2' ERR

die() {
    echo "build.sh: error: $*" >&2
    exit 1
}

usage() {
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    cat <<'EOF'

Options:
  --profile release|debug   which cargo profile's binaries to use (default release)
  --tag NAME[:TAG]          the image's tag (default baton:dev)
  --no-cargo                do not run cargo; use the binaries already in target/<profile>/
  --bin-dir DIR             take baton-node and baton from DIR (implies --no-cargo; env
                            BATON_BIN_DIR does the same)
  -h, --help                this text
EOF
}

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

profile=release
tag=baton:dev
run_cargo=1
bin_dir="${BATON_BIN_DIR:-}"

while [ $# -gt 0 ]; do
    case "$1" in
    --profile)
        [ $# -ge 2 ] || die "--profile needs a value: release or debug"
        profile="$2"
        shift 2
        ;;
    --profile=*)
        profile="${1#*=}"
        shift
        ;;
    --tag)
        [ $# -ge 2 ] || die "--tag needs a value, e.g. baton:dev"
        tag="$2"
        shift 2
        ;;
    --tag=*)
        tag="${1#*=}"
        shift
        ;;
    --no-cargo)
        run_cargo=0
        shift
        ;;
    --bin-dir)
        [ $# -ge 2 ] || die "--bin-dir needs a directory"
        bin_dir="$2"
        shift 2
        ;;
    --bin-dir=*)
        bin_dir="${1#*=}"
        shift
        ;;
    -h | --help)
        usage
        exit 0
        ;;
    *)
        usage >&2
        die "unknown argument: $1"
        ;;
    esac
done

case "$profile" in
release | debug) ;;
*) die "--profile must be release or debug, not '$profile'" ;;
esac
[ -n "$tag" ] || die "--tag must not be empty"

command -v docker >/dev/null || die "docker is not installed (the docker CLI is not on PATH)"
command -v ldd >/dev/null || die "ldd is not installed (Debian: libc-bin)"
docker info >/dev/null 2>&1 ||
    die "the Docker daemon is not reachable ($(docker info 2>&1 >/dev/null | tail -n 1)); start it (dockerd) or set DOCKER_HOST"

if [ -n "$bin_dir" ]; then
    run_cargo=0
else
    target="${CARGO_TARGET_DIR:-$repo/target}"
    case "$target" in /*) ;; *) target="$repo/$target" ;; esac
    bin_dir="$target/$profile"
fi

if [ "$run_cargo" = 1 ]; then
    command -v cargo >/dev/null || die "cargo is not on PATH (or pass --no-cargo / --bin-dir)"
    cargo_profile=()
    [ "$profile" = release ] && cargo_profile=(--release)
    echo "build.sh: cargo build ${cargo_profile[*]} -p baton-node -p baton-cli" >&2
    (cd "$repo" && cargo build "${cargo_profile[@]}" -p baton-node -p baton-cli) >&2
fi

bins=()
cargo_hint="cargo build -p baton-node -p baton-cli"
[ "$profile" = debug ] || cargo_hint="cargo build --release -p baton-node -p baton-cli"
for name in baton-node baton; do
    bin="$bin_dir/$name"
    [ -f "$bin" ] && [ -x "$bin" ] ||
        die "no executable $bin (build it: $cargo_hint, or point --bin-dir at the binaries)"
    bins+=("$bin")
done

ctx="$(mktemp -d "${TMPDIR:-/tmp}/baton-image.XXXXXX")"
trap 'rm -rf "$ctx"' EXIT
root="$ctx/rootfs"
mkdir -p "$root/usr/local/bin" "$root/etc" "$ctx/data"
install -m 0755 "${bins[@]}" "$root/usr/local/bin/"

# The shared libraries, from ldd's "name => /path (addr)" and "/path (addr)" lines; the vDSO
# has no file. Copied with symlinks resolved, each at the path the binary asks for.
libs=()
for bin in "${bins[@]}"; do
    out="$(ldd "$bin" 2>&1)" || {
        case "$out" in
        *"not a dynamic executable"* | *"statically linked"*) continue ;;
        *) die "ldd $bin failed: $out" ;;
        esac
    }
    if grep -q "not found" <<<"$out"; then
        die "ldd $bin: missing libraries: $(grep 'not found' <<<"$out" | tr -s ' \t' ' ')"
    fi
    while read -r lib; do
        libs+=("$lib")
    done < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$out")
done
[ ${#libs[@]} -gt 0 ] || echo "build.sh: the binaries are static: no libraries to copy" >&2
for lib in $(printf '%s\n' "${libs[@]}" | sort -u); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
    echo "build.sh: library $lib" >&2
done

# What scratch lacks and the binaries use: a user for uid 65532 (the node runs as it),
# host-name lookups through /etc/hosts then DNS (Docker provides both files at run time),
# and a /tmp (`baton-node dev` puts its data there).
cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
baton:x:65532:65532:baton:/var/lib/baton:/sbin/nologin
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
baton:x:65532:
EOF
echo "hosts: files dns" >"$root/etc/nsswitch.conf"
mkdir -p "$root/tmp"
chmod 1777 "$root/tmp"
chmod 0755 "$root" "$root/etc" "$root/usr" "$root/usr/local" "$root/usr/local/bin" "$ctx/data"
chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/nsswitch.conf"

revision="$(git -C "$repo" rev-parse HEAD 2>/dev/null)" || revision=unknown
version="$("${bins[0]}" --version 2>/dev/null | awk '{ print $2 }')" || version=unknown
# The labels go into the Dockerfile itself: each --label flag would be one more build step.
sed -e "s|image.version=\"unknown\"|image.version=\"${version:-unknown}\"|" \
    -e "s|image.revision=\"unknown\"|image.revision=\"${revision:-unknown}\"|" \
    "$here/Dockerfile" >"$ctx/Dockerfile"

# The legacy builder needs no buildx plugin and does all this Dockerfile asks.
export DOCKER_BUILDKIT="${DOCKER_BUILDKIT:-0}"
echo "build.sh: docker build -t $tag, binaries from $bin_dir" >&2
docker build --iidfile "$ctx/iid" -t "$tag" "$ctx" >&2 || die "docker build failed (see above)"
echo "$tag $(cat "$ctx/iid")"
