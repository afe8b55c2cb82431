#!/usr/bin/env bash
# Builds the gpuship container image with Debian's buildah, FROM scratch: no base image, no
# registry contacted. `make image` runs it; as root it also works on its own from the repository:
#
#   deploy/container/build.sh [--binary PATH] [--tag NAME:TAG] [--archive FILE.tar] [--context DIR]
#
#   --binary   the agent to put in the image (default: target/release/gpuship, built here with
#              `cargo build --release --locked -p gpuship --bin gpuship`)
#   --tag      default localhost/gpuship:<workspace version>
#   --archive  also write the image as an OCI archive (for `ctr images import`, `skopeo copy`)
#   --context  where the build context is assembled (default target/image/context; its rootfs/
#              is made anew)
#
# The root filesystem is assembled under <context>/rootfs from the build machine's
# Debian packages: the binary (stripped), exactly the shared libraries `ldd` names for it (and
# the dynamic loader), the CA bundle of ca-certificates, each of those packages' copyright file,
# /etc/gpuship/gpuship.toml (config/gpuship.toml), a passwd/group naming root. Nothing else: no
# shell, no package manager. deploy/container/Containerfile turns that folder into the image.
# Layer and config timestamps are the commit's time, so two builds of one commit and binary
# give the same image id.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)

binary=
tag=
archive=
context=$root/target/image/context
while [ $# -gt 0 ]; do
    case "$1" in
    --binary) binary=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --archive) archive=$2; shift 2 ;;
    --context) context=$2; shift 2 ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
# Paths are the caller's; the build runs from the repository.
[ -z "$binary" ] || binary=$(realpath -m "$binary")
[ -z "$archive" ] || archive=$(realpath -m "$archive")
context=$(realpath -m "$context")
cd "$root"

for tool in buildah ldd strip dpkg-query; do
    command -v "$tool" >/dev/null || {
        echo "build.sh: $tool not found (make image installs buildah from Debian)" >&2
        exit 1
    }
done
[ -f /etc/ssl/certs/ca-certificates.crt ] || {
    echo "build.sh: /etc/ssl/certs/ca-certificates.crt missing: apt-get install ca-certificates" >&2
    exit 1
}

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
# Under sudo the checkout belongs to another user, which git refuses unless told it is safe.
git() { command git -c safe.directory="$root" "$@"; }
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
# A tree with uncommitted changes is not that commit: say so in the label.
if [ "$revision" != unknown ] && ! git diff --quiet HEAD -- 2>/dev/null; then
    revision="$revision-dirty"
fi
epoch=$(git log -1 --format=%ct 2>/dev/null || date +%s)
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
tag=${tag:-localhost/gpuship:$version}

if [ -z "$binary" ]; then
    cargo build --release --locked -p gpuship --bin gpuship
    binary=target/release/gpuship
fi
[ -x "$binary" ] || { echo "build.sh: $binary is not an executable" >&2; exit 1; }

rootfs=$context/rootfs
rm -rf "$rootfs"
mkdir -p "$rootfs"/{etc/gpuship,usr/local/bin,usr/share/gpuship,tmp,var/lib/gpuship}
chmod 1777 "$rootfs/tmp"
chmod 0700 "$rootfs/var/lib/gpuship"

strip --strip-unneeded -o "$rootfs/usr/local/bin/gpuship" "$binary"
chmod 0755 "$rootfs/usr/local/bin/gpuship"
install -m 0644 config/gpuship.toml "$rootfs/etc/gpuship/gpuship.toml"

# The Debian package owning a file, by the path ldd printed or by its real path (with merged
# /usr, dpkg knows /lib/x86_64-linux-gnu/libc.so.6, not /usr/lib/...).
package_of() {
    local path owner
    for path in "$1" "$(readlink -f "$1")"; do
        owner=$(dpkg-query -S "$path" 2>/dev/null | head -1 | cut -d: -f1)
        [ -z "$owner" ] || { echo "$owner"; return 0; }
    done
    return 1
}

packages=()
add_file() {
    local path=$1 package
    mkdir -p "$rootfs$(dirname "$path")"
    cp -L "$path" "$rootfs$path"
    package=$(package_of "$path") || {
        echo "build.sh: $path belongs to no Debian package" >&2
        exit 1
    }
    packages+=("$package")
}

# Every library the binary loads, at the path the loader resolves it to, and the loader.
# No ld.so cache: the loader's built-in folders (/lib/x86_64-linux-gnu, ...) are where they go.
libs=$(ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
[ -n "$libs" ] || { echo "build.sh: ldd found no libraries in $binary (static?)" >&2; exit 1; }
if ldd "$binary" | grep -q 'not found'; then
    ldd "$binary" >&2
    echo "build.sh: a library of $binary is missing on this machine" >&2
    exit 1
fi
for lib in $libs; do
    add_file "$lib"
done

# TLS: librdkafka's OpenSSL reads OPENSSLDIR (/usr/lib/ssl on Debian), the OTLP sink's rustls
# the native bundle; both end at the one file ca-certificates generates.
# (update-ca-certificates writes the bundle; no package owns the file itself.)
mkdir -p "$rootfs/etc/ssl/certs"
cp -L /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
packages+=(ca-certificates)
mkdir -p "$rootfs/usr/lib/ssl"
ln -s /etc/ssl/certs "$rootfs/usr/lib/ssl/certs"
ln -s /etc/ssl/certs/ca-certificates.crt "$rootfs/usr/lib/ssl/cert.pem"

cat >"$rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/var/lib/gpuship:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
cat >"$rootfs/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
EOF
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$rootfs/etc/nsswitch.conf"

# What the image carries from Debian, with versions, and each package's license terms.
printf '%s\n' "${packages[@]}" | sort -u | while read -r package; do
    dpkg-query -W -f '${Package} ${Version}\n' "$package"
    doc=/usr/share/doc/${package%%:*}/copyright
    if [ -f "$doc" ]; then
        mkdir -p "$rootfs$(dirname "$doc")"
        cp -L "$doc" "$rootfs$doc"
    fi
done >"$rootfs/usr/share/gpuship/debian-packages"

buildah build --quiet --layers=false --timestamp "$epoch" \
    --build-arg VERSION="$version" --build-arg REVISION="$revision" --build-arg CREATED="$created" \
    -f deploy/container/Containerfile -t "$tag" "$context" >/dev/null

if [ -n "$archive" ]; then
    rm -f "$archive"
    buildah push --quiet "$tag" "oci-archive:$archive:$tag"
fi

echo "built $tag (version $version, revision $revision): $(du -sh "$rootfs" | cut -f1) unpacked"
echo "Debian packages:" $(cut -d' ' -f1 "$rootfs/usr/share/gpuship/debian-packages")
