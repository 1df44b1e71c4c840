#!/bin/sh
# Entry point of every container of the image: seeds numba's cache folder, then runs the command.
#
# numba loads compiled loops only from a cache folder it can write to, and the root filesystem is read-only
# under compose, so the cache the image was built with (PPRL_NUMBA_CACHE_SEED, /opt/pprl/numba-cache) is
# copied to NUMBA_CACHE_DIR (/tmp/pprl-numba-cache, a tmpfs) once per container start; the marker file
# .seeded records that. If the folder cannot be written, the node still works: party/numba_jit.py then
# compiles without a cache (about a minute of CPU at start). docs/deployment.md "The image".
seed=${PPRL_NUMBA_CACHE_SEED:-}
dir=${NUMBA_CACHE_DIR:-}
if [ -n "$seed" ] && [ -n "$dir" ] && [ -d "$seed" ] && [ ! -e "$dir/.seeded" ]; then
  if ! { mkdir -p "$dir" && cp -R -p "$seed/." "$dir/" && : >"$dir/.seeded"; } 2>/dev/null; then
    echo "entrypoint: warning: cannot copy numba's cache to $dir (NUMBA_CACHE_DIR): compiled loops are" \
      "compiled at start instead" >&2
  fi
fi
exec "$@"
