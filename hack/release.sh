#!/usr/bin/env bash
# release.sh - publish as Slinky publishes: the image and the three charts as OCI artifacts in one registry, so a
# first install is `helm install <release> oci://<registry>/charts/<chart>` with nothing built or cloned.
#   hack/release.sh REGISTRY [VERSION]     (`make release REGISTRY=... [VERSION=...]`)
# REGISTRY: host[:port][/path], the project's registry for a tagged release, a local one for the tests.
# VERSION: the image tag and the charts' version, charts/slurm-operator's version when not given.
# Pushes REGISTRY/slinky-metacontroller:VERSION (built by hack/image.sh with the engine it picks), then
# slurm-operator, slurm-bridge and slurm as oci://REGISTRY/charts/<chart>:VERSION (`helm push`), each packaged
# with version VERSION, the operator's and the bridge's with appVersion VERSION and image.repository
# REGISTRY/slinky-metacontroller, so their default image is the one pushed beside them (charts/slurm's
# appVersion stays the Slurm version it deploys). Prints each artifact's reference.
# Credentials are the engine's and helm's own (`buildah login`, `helm registry login`), made beforehand.
# RELEASE_PLAIN_HTTP=1 talks plain HTTP to the registry (a local test registry without TLS).
set -euo pipefail
cd "$(dirname "$0")/.."
registry=${1:?usage: hack/release.sh REGISTRY [VERSION]}
registry=${registry%/}
version=${2:-$(sed -n 's/^version: *"*\([^"]*\)"*$/\1/p' charts/slurm-operator/Chart.yaml)}
helm=${HELM:-.cache/bin/helm}
[ -x "$helm" ] || { echo "release: no helm at $helm (make release installs it)" >&2; exit 1; }
case $registry in *://*) echo "release: REGISTRY is host[:port][/path], without a scheme: $registry" >&2; exit 1 ;; esac
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$ ]] \
  || { echo "release: VERSION must be a semantic version (helm needs one), got '$version'" >&2; exit 1; }
plain=()
tls=true
if [ "${RELEASE_PLAIN_HTTP:-0}" = 1 ]; then plain=(--plain-http); tls=false; fi
image=$registry/slinky-metacontroller:$version
say() { echo "release: $*" >&2; }

hack/image.sh "$image" >&2
if command -v buildah >/dev/null && buildah inspect --type image "$image" >/dev/null 2>&1; then
  buildah push --quiet --tls-verify="$tls" "$image" "docker://$image" >&2
elif command -v podman >/dev/null && podman image exists "$image"; then
  podman push --quiet --tls-verify="$tls" "$image" >&2
else
  docker push --quiet "$image" >&2
fi
say "pushed $image"
echo "$image"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ours='ghcr.io/slinky-metacontroller/slinky-metacontroller'
for chart in slurm-operator slurm-bridge slurm; do
  cp -rL "charts/$chart" "$work/$chart"   # files/ links to crds/ and compositecontrollers/: packaged as files
  app=()
  if [ "$chart" != slurm ]; then
    sed -i "s|^\(  repository: \)$ours\$|\1$registry/slinky-metacontroller|" "$work/$chart/values.yaml"
    grep -q "^  repository: $registry/slinky-metacontroller\$" "$work/$chart/values.yaml" \
      || { echo "release: charts/$chart/values.yaml: no 'image.repository: $ours' line to point at $registry" >&2; exit 1; }
    app=(--app-version "$version")
  fi
  "$helm" package "$work/$chart" --version "$version" "${app[@]}" -d "$work/out" >/dev/null
  "$helm" push "$work/out/$chart-$version.tgz" "oci://$registry/charts" "${plain[@]}" >&2
  say "pushed oci://$registry/charts/$chart:$version"
  echo "oci://$registry/charts/$chart:$version"
done
