# Sourced by the Dockerfile's build stage before pip runs: empty index build arguments mean "pip's default"
# (an empty PIP_INDEX_URL would otherwise break pip), and the system CA bundle is used when there is one, so
# a base image whose trust store was extended (scripts/docker_base_image.sh) works behind TLS-inspecting
# proxies.
[ -n "${PIP_INDEX_URL:-}" ] || unset PIP_INDEX_URL
[ -n "${PIP_EXTRA_INDEX_URL:-}" ] || unset PIP_EXTRA_INDEX_URL
[ -n "${PIP_TRUSTED_HOST:-}" ] || unset PIP_TRUSTED_HOST
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  export PIP_CERT=/etc/ssl/certs/ca-certificates.crt
fi
