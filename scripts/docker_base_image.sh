#!/usr/bin/env bash
# Builds a local Debian base image with Python >= 3.11 using debootstrap, for Docker engines that cannot pull
# from a registry. The result is used as the Dockerfile's BASE_IMAGE build argument:
#
#   sudo bash scripts/docker_base_image.sh                 # -> local/debian-python:bookworm
#   docker build --network host --build-arg BASE_IMAGE=local/debian-python:bookworm -t pprl:local .
#
# Options (environment variables):
#   PPRL_BASE_IMAGE  tag to create                       (default local/debian-python:bookworm)
#   DEBIAN_SUITE     Debian release                      (default bookworm: Python 3.11)
#   DEBIAN_MIRROR    mirror URL                          (default: the first Debian URI in apt's sources, else
#                                                         http://deb.debian.org/debian)
#   EXTRA_CA_DIR     *.crt files added to the image's trust store, so that pip inside `docker build` trusts
#                    the same TLS roots as this host (default /usr/local/share/ca-certificates; "" for none)
#   FORCE=1          rebuild even if the tag already exists
# Needs root, debootstrap and a running Docker engine. Nothing outside a temporary directory is changed except
# the new image.
set -euo pipefail

TAG=${PPRL_BASE_IMAGE:-local/debian-python:bookworm}
SUITE=${DEBIAN_SUITE:-bookworm}
EXTRA_CA_DIR=${EXTRA_CA_DIR-/usr/local/share/ca-certificates}

die() { echo "docker_base_image.sh: error: $*" >&2; exit 2; }

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap and chroot need it)"
command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install -y debootstrap)"
command -v docker >/dev/null || die "the docker CLI is not installed"
docker info >/dev/null 2>&1 || die "no Docker engine answers (start dockerd first)"

if [ "${FORCE:-0}" != 1 ] && docker image inspect "$TAG" >/dev/null 2>&1; then
  echo "docker_base_image.sh: $TAG already exists (FORCE=1 to rebuild)"
  exit 0
fi

mirror=${DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  # deb822 sources ("URIs: ...") first, then one-line sources ("deb URL suite ..."); skip security mirrors.
  mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | awk '/^URIs:/ && $2 !~ /security/ && $2 ~ /debian/ {print $2; exit}')
  if [ -z "$mirror" ]; then
    mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
      | awk '$1 == "deb" && $2 !~ /security/ && $2 ~ /debian/ {print $2; exit}')
  fi
  mirror=${mirror:-http://deb.debian.org/debian}
fi

work=$(mktemp -d /tmp/pprl-base.XXXXXX)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
echo "docker_base_image.sh: debootstrap $SUITE from $mirror (a few minutes)"
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
  "$SUITE" "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
  || { tail -20 "$work/debootstrap.log" >&2; die "debootstrap failed (log above)"; }

"$rootfs/usr/bin/python3" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null \
  || chroot "$rootfs" python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || die "$SUITE ships a Python older than 3.11; choose a newer DEBIAN_SUITE"

if [ -n "$EXTRA_CA_DIR" ] && compgen -G "$EXTRA_CA_DIR/*.crt" >/dev/null; then
  mkdir -p "$rootfs/usr/local/share/ca-certificates"
  cp "$EXTRA_CA_DIR"/*.crt "$rootfs/usr/local/share/ca-certificates/"
  chroot "$rootfs" update-ca-certificates >/dev/null
  echo "docker_base_image.sh: added $(ls "$EXTRA_CA_DIR"/*.crt | wc -l) CA certificate(s) from $EXTRA_CA_DIR"
fi

# Same sources inside the image as used to build it; no package caches or lists in the image.
echo "deb $mirror $SUITE main" >"$rootfs/etc/apt/sources.list"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log \
  "$rootfs"/tmp/* "$rootfs"/root/.cache

tar --numeric-owner -C "$rootfs" -c . \
  | docker import --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' - "$TAG" >/dev/null
echo "docker_base_image.sh: created $TAG ($(docker run --rm "$TAG" python3 --version))"
