#!/usr/bin/env bash
# Builds the image and runs the whole compose demo on a machine with a Docker engine, then checks that every
# party's results are in its own volume, consistent across parties and correct against the demo's truth.
#
#   bash scripts/compose_smoke.sh                        # base image python:3.11-slim-bookworm from a registry
#   bash scripts/compose_smoke.sh --local-base           # no registry: first build local/debian-python:bookworm
#                                                        #   with scripts/docker_base_image.sh (root, debootstrap)
#   PPRL_BASE_IMAGE=my/python:3.12 bash scripts/compose_smoke.sh
#
# Environment: PPRL_BASE_IMAGE, PPRL_IMAGE [pprl:smoke], PIP_INDEX_URL / PIP_EXTRA_INDEX_URL / PIP_TRUSTED_HOST
# (passed to the build), PPRL_DEMO_RECORDS [500], PPRL_DEMO_MIN_F1 [0.9], PPRL_SMOKE_PROJECT [pprlsmoke],
# PPRL_SMOKE_KEEP=1 (leave containers and volumes for inspection; default: `down -v` at the end) and every
# variable docker-compose.yml reads (ports, network mode). The project's volumes are removed at the START too,
# so each smoke run begins from nothing. Exit 0 iff the image, the demo run and every check passed.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "compose_smoke: error: $*" >&2; exit 2; }
say() { echo "== compose_smoke: $*"; }

if [ "${1:-}" = "--local-base" ]; then
  export PPRL_BASE_IMAGE=${PPRL_BASE_IMAGE:-local/debian-python:bookworm}
  PPRL_BASE_IMAGE=$PPRL_BASE_IMAGE bash scripts/docker_base_image.sh
  shift
fi
[ $# -eq 0 ] || die "unknown arguments: $* (only --local-base)"

command -v docker >/dev/null || die "the docker CLI is not installed"
docker info >/dev/null 2>&1 || die "no Docker engine answers (start dockerd, or run where Docker is available)"
if docker compose version >/dev/null 2>&1; then
  COMPOSE=(docker compose)
elif command -v docker-compose >/dev/null; then
  COMPOSE=(docker-compose)
else
  die "neither 'docker compose' nor 'docker-compose' is installed"
fi

export PPRL_BASE_IMAGE=${PPRL_BASE_IMAGE:-python:3.11-slim-bookworm}
export PPRL_IMAGE=${PPRL_IMAGE:-pprl:smoke}
export PPRL_DEMO_RECORDS=${PPRL_DEMO_RECORDS:-500}
export PPRL_DEMO_MIN_F1=${PPRL_DEMO_MIN_F1:-0.9}
PROJECT=${PPRL_SMOKE_PROJECT:-pprlsmoke}
DC=("${COMPOSE[@]}" -p "$PROJECT" -f docker-compose.yml)

cleanup() {
  local rc=$?
  if [ $rc -ne 0 ]; then
    say "FAILED (exit $rc); last logs of every service:"
    "${DC[@]}" logs --no-color --tail 40 2>&1 || true
  fi
  if [ "${PPRL_SMOKE_KEEP:-0}" = 1 ]; then
    say "PPRL_SMOKE_KEEP=1: containers and volumes of project $PROJECT left in place"
  else
    "${DC[@]}" --profile check down -v --remove-orphans >/dev/null 2>&1 || true
  fi
  exit $rc
}

say "compose command: ${COMPOSE[*]} ($("${COMPOSE[@]}" version --short 2>/dev/null || echo '?'))"
"${DC[@]}" --profile check down -v --remove-orphans >/dev/null 2>&1 || true
trap cleanup EXIT

say "building $PPRL_IMAGE on $PPRL_BASE_IMAGE"
build_args=(--build-arg "BASE_IMAGE=$PPRL_BASE_IMAGE")
for v in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST; do
  if [ -n "${!v:-}" ]; then build_args+=(--build-arg "$v=${!v}"); fi
done
docker build --network host "${build_args[@]}" -t "$PPRL_IMAGE" . >/tmp/compose_smoke_build.$$.log 2>&1 \
  || { tail -30 /tmp/compose_smoke_build.$$.log >&2; die "docker build failed (log above)"; }
rm -f /tmp/compose_smoke_build.$$.log

say "checking the image: non-root user, no compilers, no package caches, both entry points"
docker run --rm --network none "$PPRL_IMAGE" sh -c '
  set -e
  [ "$(id -u)" != 0 ] || { echo "runs as root"; exit 1; }
  for c in gcc cc c++ g++ clang make; do
    if command -v "$c" >/dev/null; then echo "compiler $c present"; exit 1; fi
  done
  for d in /root/.cache/pip "$HOME/.cache/pip" /var/cache/apt/archives/partial; do
    if [ -n "$(ls -A "$d" 2>/dev/null)" ]; then echo "cache $d present"; exit 1; fi
  done
  if ls /var/cache/apt/archives/*.deb >/dev/null 2>&1; then echo "apt archives present"; exit 1; fi
  if python -m pip --version >/dev/null 2>&1; then echo "pip present in the runtime image"; exit 1; fi
  pprl-party --help >/dev/null
  pprl-coordinator --help >/dev/null
' || die "image check failed"

# numba compiles a loop only where its cache misses; the image carries the cache the node's warm-up loads
# (docker/entrypoint.sh copies it to NUMBA_CACHE_DIR). Locked down as compose runs it, nothing is compiled.
say "checking the image's numba cache: every compiled loop a node uses is loaded, none compiled (read-only root, no caps)"
warm=$(docker run --rm --network none --read-only --tmpfs /tmp --cap-drop ALL \
  --security-opt no-new-privileges:true -e NUMBA_DEBUG_CACHE=1 "$PPRL_IMAGE" python /opt/pprl/docker/warm_cache.py 2>&1) \
  || { tail -20 <<<"$warm" >&2; die "the warm-up failed in a read-only container"; }
loaded=$(grep -c '^\[cache\] data loaded' <<<"$warm" || true)
saved=$(grep -c '^\[cache\] data saved' <<<"$warm" || true)
[ "$saved" = 0 ] && [ "$loaded" -gt 0 ] \
  || die "numba's cache in the image was not used: $loaded loops loaded, $saved compiled"
say "numba cache: $loaded loops loaded, none compiled ($(tail -1 <<<"$warm"))"

# Fixed container names (Docker DNS in bridge mode) and, with host networking, fixed ports: refuse clearly
# rather than fail half-way if another project or process holds them.
for name in pprl-coordinator pprl-party-a pprl-party-b pprl-party-c; do
  owner=$(docker inspect --format '{{ index .Config.Labels "com.docker.compose.project" }}' "$name" 2>/dev/null || true)
  if [ -n "$owner" ] && [ "$owner" != "$PROJECT" ]; then
    die "container $name belongs to compose project '$owner': run 'docker compose -p $owner down' first"
  fi
done
if [ "${PPRL_NETWORK_MODE:-host}" = host ]; then
  for port in "${PPRL_COORDINATOR_PORT:-50050}" "${PPRL_PARTY_A_PORT:-50051}" \
              "${PPRL_PARTY_B_PORT:-50052}" "${PPRL_PARTY_C_PORT:-50053}"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      die "port $port on 127.0.0.1 is in use (set PPRL_*_PORT to free ports)"
    fi
  done
fi

say "docker compose up: setup, coordinator, parties, runner (start order by health, no sleeps)"
"${DC[@]}" up -d --no-build
runner=$("${DC[@]}" ps -a -q runner)
[ -n "$runner" ] || die "the runner container was not created"
status=$(docker wait "$runner")
"${DC[@]}" logs --no-color runner
[ "$status" = 0 ] || die "the runner (first linkage) exited with $status"

# What numba wrote after docker/entrypoint.sh seeded the cache: loops (and argument types) the node compiled
# in this container. The image check above shows the warm-up compiles nothing; the first run still compiles
# a few variants the image's cache lacks (loops called on read-only arrays received from peers): listed,
# no error.
say "the nodes' start-up warm-up and the loops compiled in each container beyond the image's numba cache"
for name in pprl-party-a pprl-party-b pprl-party-c; do
  warmed=$(docker logs "$name" 2>&1 | grep -o 'comparison kernel warmed up in [0-9.]*s' | tail -1)
  [ -n "$warmed" ] || die "$name logged no finished warm-up"
  new=$(docker exec "$name" sh -c 'cd "$NUMBA_CACHE_DIR" && find . -name "*.nbc" -newer .seeded' \
    | sed 's|.*/||; s|-[0-9]*\.py3[0-9]*\.\([0-9]*\)\.nbc$|#\1|' | sort | tr '\n' ' ')
  say "$name: $warmed; compiled in the container: ${new:-nothing}"
done

say "a second linkage on the running nodes (docker compose run --rm runner)"
"${DC[@]}" run --rm -T runner >/dev/null

say "checking every party's results volume"
"${DC[@]}" --profile check run --rm -T check

for party in party-a party-b party-c; do
  vol="${PROJECT}_${party}"
  files=$(docker run --rm --network none -v "$vol:/v:ro" "$PPRL_IMAGE" \
    sh -c 'cd /v/results && ls -1 */matches.csv' | tr '\n' ' ')
  say "volume $vol holds results: $files"
done
say "OK"
