#!/bin/bash
# image-rootfs.sh - unpack a container image for the cluster lab's node agent, as a kubelet's runtime would
# before it starts a container: the image's filesystem in DIR/rootfs and its config (Entrypoint, Cmd, Env,
# WorkingDir, User) in DIR/config.json, DIR named by the image's ID so an unchanged image is unpacked once.
# The image comes from the local buildah storage (hack/image.sh --ci builds it there); nothing is pulled.
#   hack/cluster/image-rootfs.sh IMAGE   prints DIR
# Settings: CLUSTER_LAB_IMAGE_CACHE (/var/cache/slinky-mc/cluster-images).
set -euo pipefail
image=${1:?usage: hack/cluster/image-rootfs.sh IMAGE}
cache=${CLUSTER_LAB_IMAGE_CACHE:-/var/cache/slinky-mc/cluster-images}
command -v buildah >/dev/null || { echo "image-rootfs: buildah is missing (hack/image.sh installs it)" >&2; exit 1; }
id=$(buildah inspect --type image --format '{{.FromImageID}}' "$image" 2>/dev/null) \
  || { echo "image-rootfs: no image $image in buildah's storage (hack/image.sh --ci builds it)" >&2; exit 1; }
dir=$cache/${id:0:16}
if [ ! -s "$dir/config.json" ]; then
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/.unpack.XXXXXX")
  trap 'rm -rf "$tmp"; [ -z "${ctr:-}" ] || buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
  ctr=$(buildah from --pull=never "$image")
  root=$(buildah mount "$ctr")
  cp -a "$root/." "$tmp/rootfs"
  buildah umount "$ctr" >/dev/null
  buildah inspect --type image "$image" \
    | python3 -c 'import json, sys; json.dump(json.load(sys.stdin)["OCIv1"]["config"], sys.stdout)' >"$tmp/config.json"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  # older unpacked images go: one per image is enough, and each is the size of an image
  find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name "${id:0:16}" ! -name '.unpack.*' -mmin +60 -exec rm -rf {} +
fi
echo "$dir"
