# Coxswain's container images, one Dockerfile, two targets:
#
#   coordinator  `coxswain serve` (and `coxswain autosize`): Python and the runtime install
#                only, no Java, no PySpark (about a tenth of the worker's size)
#   worker       `coxswain worker`: Java 17, PySpark and the rest of coxswain[worker], and the
#                Spark Kafka connector's jars baked in (workers need no network to start),
#                with the Spark home its Python processes import PySpark through
#                (worker/jvm/spark_home.py; the cache is read-only at run time)
#
#   docker build --target coordinator -t coxswain-coordinator .
#   docker build --target worker -t coxswain-worker .
#
# Both run as the unprivileged user coxswain (uid 10001) and take their settings from
# COXSWAIN_* variables (or flags; see docs/coordinator.md). The coordinator listens on 0.0.0.0:8080,
# so it refuses to start without COXSWAIN_WORKER_TOKEN and COXSWAIN_ADMIN_TOKEN (or
# COXSWAIN_INSECURE=true). A job's code goes on PYTHONPATH (/app): `FROM coxswain-worker`,
# `COPY myjob.py /app/`, then `coxswain worker --app myjob:process_task ...`.
#
# Behind a TLS-intercepting proxy, hand the build your CA bundle without baking it into any
# image: mount it and name it, e.g. with Podman
#   podman build --build-arg CA_BUNDLE=/run/host-ca.crt \
#       -v /etc/ssl/certs/ca-certificates.crt:/run/host-ca.crt:ro --target worker .
# (pip and the jar download use it; the final images never contain it).

ARG BASE_IMAGE=debian:bookworm-slim

# Python and the user, shared by both images
FROM ${BASE_IMAGE} AS runtime-base
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --home-dir /var/lib/coxswain \
        --create-home --shell /usr/sbin/nologin coxswain \
    && mkdir -p /app
ENV PATH=/opt/coxswain/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONPATH=/app

# A virtual environment with Coxswain installed from this source tree
FROM runtime-base AS build-base
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/coxswain
COPY . /src

FROM build-base AS coordinator-build
ARG CA_BUNDLE=
RUN if [ -n "$CA_BUNDLE" ]; then export PIP_CERT="$CA_BUNDLE"; fi \
    && /opt/coxswain/bin/pip install --disable-pip-version-check /src

FROM build-base AS worker-build
ARG CA_BUNDLE=
RUN if [ -n "$CA_BUNDLE" ]; then export PIP_CERT="$CA_BUNDLE" SSL_CERT_FILE="$CA_BUNDLE"; fi \
    && /opt/coxswain/bin/pip install --disable-pip-version-check "/src[worker]" \
    && COXSWAIN_CACHE_DIR=/opt/coxswain/cache /opt/coxswain/bin/python -c \
        "from worker.jvm.jars import connector_jars; print(*connector_jars(), sep='\n')" \
    && /opt/coxswain/bin/python -c "from pathlib import Path; \
from worker.jvm.spark_home import compiled_spark_home as home; \
print(home(Path('/opt/coxswain/cache/jvm')))"

# The worker: Java for Spark, then the environment and jars built above
FROM runtime-base AS worker
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/* \
    && install -d -o coxswain -g coxswain /var/lib/coxswain/state
COPY --from=worker-build /opt/coxswain /opt/coxswain
ENV COXSWAIN_CACHE_DIR=/opt/coxswain/cache
USER coxswain
WORKDIR /var/lib/coxswain
# no HTTP endpoint: a worker's liveness is its lease at the coordinator (GET /status there)
HEALTHCHECK NONE
ENTRYPOINT ["coxswain"]
CMD ["worker", "--help"]

# The coordinator (last, so a build without --target makes it)
FROM runtime-base AS coordinator
COPY --from=coordinator-build /opt/coxswain /opt/coxswain
RUN install -d -o coxswain -g coxswain /var/lib/coxswain/data
ENV COXSWAIN_HOST=0.0.0.0 \
    COXSWAIN_PORT=8080 \
    COXSWAIN_DATA_DIR=/var/lib/coxswain/data
USER coxswain
WORKDIR /var/lib/coxswain
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('COXSWAIN_PORT', '8080'), timeout=2)"]
ENTRYPOINT ["coxswain"]
CMD ["serve"]
