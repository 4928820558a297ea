#!/usr/bin/env bash
# Build the one image of both processes from the Dockerfile with the first usable engine:
# docker (when its daemon answers), podman, buildah. IMAGE_ENGINE=<one of them> picks one.
# Usage: hack/image.sh <repository:tag>; prints the image name on success, one line why not otherwise.
# BASE_IMAGE=<image> builds over another copy of the Dockerfile's base (a mirror when Docker Hub is not reachable).
set -euo pipefail
image=${1:?usage: hack/image.sh <repository:tag>}
cd "$(dirname "$0")/.."
reasons=()

usable() {  # engine -> 0 when it can build here, else records why not
  local engine=$1
  if ! command -v "$engine" >/dev/null 2>&1; then reasons+=("$engine not installed"); return 1; fi
  if [ "$engine" = docker ] && ! docker info >/dev/null 2>&1; then reasons+=("docker's daemon not reachable"); return 1; fi
  return 0
}

args=()
if [ -n "${BASE_IMAGE:-}" ]; then args=(--build-arg "BASE_IMAGE=$BASE_IMAGE"); fi

for engine in ${IMAGE_ENGINE:-docker podman buildah}; do
  usable "$engine" || continue
  case $engine in
    buildah) buildah build --layers "${args[@]}" -t "$image" -f Dockerfile . ;;
    *) "$engine" build "${args[@]}" -t "$image" -f Dockerfile . ;;
  esac
  echo "make image: built $image with $engine; push it with: $engine push $image"
  exit 0
done
echo "make image: no container engine can build here ($(IFS=,; echo "${reasons[*]}" | sed 's/,/, /g')); install podman or buildah (apt-get install podman) or start docker" >&2
exit 1
