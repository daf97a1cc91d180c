# syntax=docker/dockerfile:1
# Every Fanline service's image; SERVICE names which one (its folder under
# services/, and its console script fanline-$SERVICE):
#
#   docker build --build-arg SERVICE=api           -t fanline/api .
#   docker build --build-arg SERVICE=social-graph  -t fanline/social-graph .
#   docker build --build-arg SERVICE=tweet-store   -t fanline/tweet-store .
#   docker build --build-arg SERVICE=fanout-worker -t fanline/fanout-worker .
#
# The context is the REPOSITORY ROOT: the image also needs shared/ and
# constraints.txt. The storage services' `docker run IMAGE migrate` creates
# or migrates that service's Cassandra keyspace and exits (the compose
# `cassandra-init-*` jobs do exactly that). The fan-out worker's /healthz,
# /readyz and /metrics are served by faust's own web server, and faust keeps
# a small data directory under $FANLINE_DATA_DIR (.data in the working
# directory by default), which is why /app belongs to the runtime user.

# glibc, not musl: cassandra-driver (and uvloop, orjson, pydantic-core) publish
# manylinux wheels only, so an alpine base would compile them from source.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- builder: resolve and install every wheel into a self-contained venv ----
FROM ${PYTHON_IMAGE} AS builder
ARG SERVICE
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
# Each service's port variable and default port (its config.py; checked by
# tests/unit/test_deploy_files.py), for the health check below. An unknown
# SERVICE fails the build here.
RUN case "$SERVICE" in \
      api)           echo "FANLINE_API_PORT 8000" ;; \
      social-graph)  echo "FANLINE_SOCIAL_GRAPH_PORT 8001" ;; \
      tweet-store)   echo "FANLINE_TWEET_STORE_PORT 8002" ;; \
      fanout-worker) echo "FANLINE_WORKER_PORT 8003" ;; \
      *) echo "unknown SERVICE='$SERVICE' (build with --build-arg SERVICE=<folder under services/>)" >&2; exit 1 ;; \
    esac > /tmp/fanline-port
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY constraints.txt ./
COPY shared/ shared/
COPY services/${SERVICE}/ services/${SERVICE}/
# Every image ships the operator CLI (`fanline`, docs/operations/cli.md;
# deploy/k8s/tools runs it as a Job from the api image), without migrate's
# storage code: `migrate` is each storage image's own entry point.
COPY tools/fanline-cli/ tools/fanline-cli/
# Not editable (-e): the venv must not point back into /src, which the runtime
# stage does not have. -c pins every third-party version to what CI tested.
RUN pip install -c constraints.txt ./shared ./services/${SERVICE} ./tools/fanline-cli \
 && mv /tmp/fanline-port /opt/venv/fanline-port \
 && ln -s fanline-${SERVICE} /opt/venv/bin/fanline-service

# ---- runtime: the venv and an unprivileged user, nothing else ----
FROM ${PYTHON_IMAGE} AS runtime
# A fixed numeric UID/GID, so orchestrators can verify "runAsNonRoot".
# --no-log-init: a high UID would otherwise grow a huge sparse /var/log/lastlog.
RUN groupadd --gid 10001 fanline \
 && useradd --no-log-init --uid 10001 --gid fanline --home-dir /app --shell /usr/sbin/nologin fanline \
 && install -d -o fanline -g fanline /app
COPY --from=builder /opt/venv /opt/venv
WORKDIR /app
# Bind all interfaces inside a container; each service reads only its own
# FANLINE_<SERVICE>_HOST. (No EXPOSE: it cannot depend on SERVICE's value;
# compose publishes the api's port and k8s declares each containerPort, and
# each service's /metrics port, the port + 50.)
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    FANLINE_API_HOST=0.0.0.0 \
    FANLINE_SOCIAL_GRAPH_HOST=0.0.0.0 \
    FANLINE_TWEET_STORE_HOST=0.0.0.0 \
    FANLINE_WORKER_HOST=0.0.0.0
USER 10001:10001
# slim images have no curl: probe /healthz with the standard library, on the
# service's port (its variable if set, else the default). urlopen raises on a
# refused connection, a timeout or a 4xx/5xx answer, so python exits non-zero
# and the container turns unhealthy.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; var, port = open('/opt/venv/fanline-port').read().split(); urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get(var, port), timeout=2)"]
# Exec form, so signals reach the service: fanline-service is fanline-$SERVICE.
ENTRYPOINT ["fanline-service"]
