# One image, two entrypoints: `oma-operator` (the Deployment) and `oma-runner` (runner pods).
# From a checkout: `docker build .` (or `podman build .`) builds the wheels in the first stage,
# which needs PyPI. hack/build-image builds without network instead: its context holds the
# wheels it prepared (wheels/) beside this file, and a base image made from Debian packages.
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS wheels
COPY . /src
# Prepared wheels (hack/build-image) are used as they are; a checkout is built into wheels.
# Behind a TLS-intercepting proxy, hand pip its CA as a build secret:
#   docker build --secret id=pip-ca,src=/path/to/ca.pem .
RUN --mount=type=secret,id=pip-ca \
    if [ -f /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi; \
    if [ -d /src/wheels ]; then cp -r /src/wheels /wheels; \
    else python3 -m venv /tmp/pip \
      && /tmp/pip/bin/pip install --no-cache-dir -q --upgrade pip \
      && /tmp/pip/bin/pip wheel --no-cache-dir -q --wheel-dir /wheels "/src[all]"; fi

FROM ${BASE} AS build
COPY --from=wheels /wheels/ /wheels/
RUN python3 -m venv /opt/oma \
 && /opt/oma/bin/pip install --no-cache-dir --no-index --find-links /wheels 'oma[all]' \
 && /opt/oma/bin/python -m compileall -q /opt/oma

FROM ${BASE}
COPY --from=build /opt/oma /opt/oma
ENV PATH=/opt/oma/bin:/usr/local/bin:/usr/bin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
# Non-root, and nothing is written outside /tmp, so a read-only root filesystem works. The user
# has a passwd entry: libraries that ask who they run as (kopf's peering id, getpass) need one.
RUN echo 'oma:x:65532:65532:oma:/tmp:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'oma:x:65532:' >> /etc/group
USER 65532:65532
WORKDIR /tmp
CMD ["oma-operator", "--help"]
