#!/usr/bin/env bash
# Build the one image of both processes from the Dockerfile with the first usable engine: docker (when its daemon
# answers), podman, buildah; IMAGE_ENGINE=<one of them> picks one. With none, a root host with apt-get gets buildah
# (Debian's) installed; buildah and podman get runc, the OCI runtime that also runs on hosts with hybrid cgroups.
#   hack/image.sh <repository:tag>   `make image`: builds it, then prints the image and how to push it
#   hack/image.sh --ci               `make test`'s image part: tags localhost/slinky-metacontroller:ci-<hash of what
#                                    goes into the image: the base's name, the Dockerfile, .dockerignore and what it
#                                    lets in>, built only when that tag is missing; prints the image's name alone on
#                                    stdout, and on stderr where it is and how long the build took (the build's own
#                                    output goes to a log, its end printed when the build fails)
# The base: BASE_IMAGE=<image> when given (a registry's copy of the Dockerfile's default); else the Dockerfile's default
# when the engine has it or can pull it within IMAGE_PULL_TIMEOUT (30 s); else the local one hack/image-base.sh makes
# once from this host's Debian mirror, said in one line.
# pip in the build uses the index, trusted hosts and CA bundle this machine's pip names (PIP_INDEX_URL, PIP_TRUSTED_HOST,
# PIP_CERT, else `pip config`'s global.*), pip's defaults when it names none. The CA bundle is mounted into the build
# read-only, over the base's, and is not in the image (buildah and podman; docker has no build volumes).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/apt.sh
. hack/lib/apt.sh
ci=0
if [ "${1:-}" = --ci ]; then ci=1; image=""; else image=${1:?usage: hack/image.sh <repository:tag> | --ci}; fi
CI_REPOSITORY=localhost/slinky-metacontroller
PULL_TIMEOUT=${IMAGE_PULL_TIMEOUT:-30}
# where the build sees the host's CA bundle: over the base's own (both bases have one), so no mount point is left
BUILD_CERT=/etc/ssl/certs/ca-certificates.crt
say() { echo "make image: $*" >&2; }
reasons=()

usable() {  # engine -> 0 when it can build here, else records why not
  local engine=$1
  if ! command -v "$engine" >/dev/null 2>&1; then reasons+=("$engine not installed"); return 1; fi
  if [ "$engine" = docker ] && ! docker info >/dev/null 2>&1; then reasons+=("docker's daemon not reachable"); return 1; fi
  return 0
}

can_install() { [ "$EUID" = 0 ] && command -v apt-get >/dev/null 2>&1; }
install_packages() {
  say "installing $* with apt-get"
  apt_install /tmp/image-apt.log "$@" || { say "apt-get could not install $*; see /tmp/image-apt.log"; exit 1; }
}

has_image() {
  case $engine in
    docker) docker image inspect "$1" ;;
    podman) podman image exists "$1" ;;
    buildah) buildah inspect --type image "$1" ;;
  esac >/dev/null 2>&1
}

engine=""
for candidate in ${IMAGE_ENGINE:-docker podman buildah}; do
  if usable "$candidate"; then engine=$candidate; break; fi
done
if [ -z "$engine" ] && [[ " ${IMAGE_ENGINE:-buildah} " == *" buildah "* ]] && can_install; then
  install_packages buildah runc
  engine=buildah
fi
if [ -z "$engine" ]; then
  echo "make image: no container engine can build here ($(IFS=,; echo "${reasons[*]}" | sed 's/,/, /g')); install podman or buildah (apt-get install podman) or start docker" >&2
  exit 1
fi

build=()
case $engine in
  buildah) build=(buildah build --layers --pull=false) ;;
  *) build=("$engine" build) ;;
esac
if [ "$engine" != docker ]; then
  # RUN steps need an OCI runtime; crun refuses hosts with cgroup v1 and v2 mounted together, runc runs on all
  if ! command -v runc >/dev/null 2>&1 && { ! command -v crun >/dev/null 2>&1 || [ -d /sys/fs/cgroup/unified ]; }; then
    can_install || { say "$engine needs the OCI runtime runc here: apt-get install runc"; exit 1; }
    install_packages runc
  fi
  if command -v runc >/dev/null 2>&1; then build+=(--runtime runc); fi
fi

default_base=$(sed -n 's/^ARG BASE_IMAGE=//p' Dockerfile)
if [ -n "${BASE_IMAGE:-}" ]; then
  base=$BASE_IMAGE
elif has_image "$default_base" || timeout "$PULL_TIMEOUT" "$engine" pull -q "$default_base" >/dev/null 2>&1; then
  base=$default_base
else
  base=$(hack/image-base.sh "$engine")
  say "$default_base cannot be pulled here; using the local base $base (hack/image-base.sh, from this host's Debian mirror)"
fi

if [ "$ci" = 1 ]; then
  # what the build reads: the base's name, the Dockerfile, and the context .dockerignore lets in (its ! lines)
  mapfile -t context < <(sed -n 's:^!\(.*[^/]\)/*$:\1:p' .dockerignore)
  hash=$({ echo "$base"; find Dockerfile .dockerignore "${context[@]}" -type f ! -path '*/__pycache__/*' -print0 \
    | LC_ALL=C sort -z | xargs -0 sha256sum; } | sha256sum | cut -c1-12)
  image=$CI_REPOSITORY:ci-$hash
  if has_image "$image"; then
    say "$image is in $engine's local storage already (same content); not rebuilt"
    echo "$image"
    exit 0
  fi
fi

args=(--build-arg "BASE_IMAGE=$base")
pip=()
if [ -x .venv/bin/python ]; then pip=(.venv/bin/python -m pip); elif command -v python3 >/dev/null 2>&1; then pip=(python3 -m pip); fi
pip_config=$({ [ ${#pip[@]} = 0 ] || PIP_DISABLE_PIP_VERSION_CHECK=1 "${pip[@]}" config list 2>/dev/null; } || true)
pip_setting() {  # KEY -> PIP_<KEY>, else pip's global.<key>
  local var=PIP_${1^^}
  var=${var//-/_}
  if [ -n "${!var:-}" ]; then echo "${!var}"; return; fi
  sed -n "s/^global\\.$1='\\(.*\\)'\$/\\1/p" <<<"$pip_config" | head -1
}
index=$(pip_setting index-url)
trusted=$(pip_setting trusted-host)
cert=$(pip_setting cert)
[ -z "$index" ] || args+=(--build-arg "PIP_INDEX_URL=$index")
[ -z "$trusted" ] || args+=(--build-arg "PIP_TRUSTED_HOST=$trusted")
if [ -n "$cert" ] && [ -f "$cert" ]; then
  if [ "$engine" = docker ]; then
    say "pip's CA bundle $cert is not passed to docker build (no build volumes); pip uses the image's own"
  else
    args+=(--build-arg "PIP_CERT=$BUILD_CERT" -v "$cert:$BUILD_CERT:ro")
  fi
fi

t0=$SECONDS
if [ "$ci" = 1 ]; then
  log=$(mktemp "${TMPDIR:-/tmp}/slinky-mc-image-build.XXXXXX")
  say "building $image with $engine (log: $log)"
  if ! "${build[@]}" "${args[@]}" -t "$image" -f Dockerfile . >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    say "$engine could not build $image after $((SECONDS - t0)) s; the end of its log is above, all of it in $log"
    exit 1
  fi
  rm -f "$log"
  say "built $image with $engine in $((SECONDS - t0)) s, in $engine's local storage ($engine inspect $image)"
  echo "$image"
else
  "${build[@]}" "${args[@]}" -t "$image" -f Dockerfile .
  echo "make image: built $image with $engine in $((SECONDS - t0)) s; push it with: $engine push $image"
fi
