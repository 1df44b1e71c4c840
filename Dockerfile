# One image for the coordinator and every party node (`pprl-coordinator ...`, `pprl-party ...`).
#
# Build (the base must provide Python >= 3.11 with the venv module):
#   docker build --network host -t pprl:local .
#   docker build --network host --build-arg BASE_IMAGE=local/debian-python:bookworm -t pprl:local .
# (scripts/docker_base_image.sh makes that local base with debootstrap where no registry can be reached.)
# Package index settings for the build stage can be passed as build arguments: PIP_INDEX_URL,
# PIP_EXTRA_INDEX_URL, PIP_TRUSTED_HOST. Only binary wheels are installed, so no compiler is ever needed.
#
# The final stage holds the base image, a virtual environment with the project and its dependencies (no
# pip, no test suites of dependencies), scripts/ (certificate and demo-data generators) and docker/
# (compose demo configuration and helpers).
# It runs as the unprivileged user `pprl` (uid 10001); node state lives under /var/lib/pprl.

ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_TRUSTED_HOST
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "BASE_IMAGE must have Python >= 3.11")' \
 && python3 -m venv /opt/pprl/venv
# Dependencies first (their layer survives source and README edits), wheels only.
COPY pyproject.toml ./
COPY docker/pip-env.sh /tmp/pip-env.sh
RUN python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
      > /tmp/requirements.txt \
 && . /tmp/pip-env.sh \
 && /opt/pprl/venv/bin/pip install --only-binary=:all: -r /tmp/requirements.txt
COPY README.md ./
COPY proto proto
COPY party party
COPY coordinator coordinator
RUN . /tmp/pip-env.sh \
 && /opt/pprl/venv/bin/pip wheel --no-deps --wheel-dir /tmp/wheels . \
 && /opt/pprl/venv/bin/pip install --no-deps --only-binary=:all: /tmp/wheels/*.whl \
 && /opt/pprl/venv/bin/python -c 'import coordinator, party, proto' \
 && /opt/pprl/venv/bin/python -m pip uninstall -q -y pip setuptools \
 && find /opt/pprl/venv/lib -type d -name tests -path '*/site-packages/*' -prune -exec rm -rf {} +
# numba's on-disk cache of every compiled loop a node uses (about a minute of CPU to compile, a second to
# load): made here against the installed files, which the final stage copies unchanged (numba keys its
# cache on each source file's path, size and mtime, which COPY --from keeps), and copied to NUMBA_CACHE_DIR
# at each start (docker/entrypoint.sh). Run from / so that the installed package is imported, not /src/party.
COPY docker/warm_cache.py /tmp/warm_cache.py
RUN cd / && NUMBA_CACHE_DIR=/opt/pprl/numba-cache /opt/pprl/venv/bin/python /tmp/warm_cache.py

FROM ${BASE_IMAGE}
ARG PPRL_UID=10001
ENV PATH=/opt/pprl/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    NUMBA_CACHE_DIR=/tmp/pprl-numba-cache \
    PPRL_NUMBA_CACHE_SEED=/opt/pprl/numba-cache \
    LANG=C.UTF-8
RUN groupadd --gid "$PPRL_UID" pprl \
 && useradd --no-create-home --uid "$PPRL_UID" --gid "$PPRL_UID" --home-dir /var/lib/pprl --shell /usr/sbin/nologin pprl \
 && mkdir -p /var/lib/pprl /volumes/coordinator /volumes/party-a /volumes/party-b /volumes/party-c /volumes/demo \
 && chown -R pprl:pprl /var/lib/pprl /volumes \
 && rm -rf /root/.cache /tmp/*
COPY --from=build /opt/pprl/venv /opt/pprl/venv
COPY --from=build /opt/pprl/numba-cache /opt/pprl/numba-cache
COPY scripts /opt/pprl/scripts
COPY docker /opt/pprl/docker
USER pprl
WORKDIR /var/lib/pprl
# docker/entrypoint.sh copies the numba cache above to NUMBA_CACHE_DIR (numba only uses a writable cache
# folder; /tmp is a tmpfs under compose's read-only root), then runs the command.
ENTRYPOINT ["/opt/pprl/docker/entrypoint.sh"]
CMD ["pprl-party", "--help"]
