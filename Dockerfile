# syntax=docker/dockerfile:1
# The hugepage-extender image: the package and its runtime dependencies only,
# pinned by requirements/constraints.txt, running as uid 65532 on a read-only
# root filesystem (nothing is written at run time).
#
#   make image    # offline, as the kind suite builds it, tagged as the chart's default
#   docker build -t ghcr.io/hugepage-extender/hugepage-extender:<appVersion> .  # with network access
#
# Build arguments (both optional):
#   PYTHON_IMAGE         the base image (default: the official Python 3.11 image,
#                        the version the tests run on). Any Debian-like image whose
#                        `python` is 3.11+ with venv works; the offline kind build
#                        (e2e/kind/images/build) passes a debootstrap'd bookworm.
#   PIP_INSTALL_OPTIONS  extra pip options, e.g. "--no-index
#                        --find-links=requirements/wheels" to install from wheels
#                        prepared on the host and put in the build context.
#
# The chart's default image is ghcr.io/hugepage-extender/hugepage-extender with
# the chart's appVersion as tag, i.e. the version in extender/__init__.py.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: a virtualenv with the wheel and its dependencies -----------------
FROM ${PYTHON_IMAGE} AS build
ARG PIP_INSTALL_OPTIONS=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/hugepage-extender
# Runtime dependencies first, in their own layer, so a source change does not
# download them again: only [project.dependencies] (no test or build tools),
# at the versions the tests ran with.
# requirements/ holds constraints.txt (and, for an offline build, wheels/).
COPY requirements/ requirements/
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies'], sep='\n')" \
      > /tmp/runtime-requirements.txt \
 && /opt/hugepage-extender/bin/pip install --no-compile $PIP_INSTALL_OPTIONS -c requirements/constraints.txt -r /tmp/runtime-requirements.txt
# Then the package itself, a regular (non-editable) install. pip goes; bytecode
# is compiled here, valid whatever the file times: the root filesystem is
# read-only at run time, so Python could never write it later.
COPY extender/ extender/
RUN /opt/hugepage-extender/bin/pip install --no-compile --no-deps $PIP_INSTALL_OPTIONS . \
 && /opt/hugepage-extender/bin/pip check \
 && /opt/hugepage-extender/bin/pip uninstall --yes pip \
 && python -m compileall -q -f --invalidation-mode unchecked-hash /opt/hugepage-extender/lib

# --- runtime ----------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="hugepage-extender" \
      org.opencontainers.image.description="kube-scheduler extender that keeps pods off nodes whose hugepage pool cannot hold them" \
      org.opencontainers.image.source="https://github.com/hugepage-extender/hugepage-extender" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/hugepage-extender/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The same uid/gid as distroless "nonroot"; the chart's securityContext runs as it.
RUN groupadd --system --gid 65532 nonroot \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin nonroot
COPY --from=build /opt/hugepage-extender /opt/hugepage-extender
USER 65532:65532
# Fail the build, not the rollout, if an import is missing.
RUN ["hugepage-extender", "--version"]
# 8888: the verbs (/filter, /prioritize, /bind); 8081: /healthz, /readyz, /metrics
# when started with --probe-port 8081 (as the chart does).
EXPOSE 8888 8081
ENTRYPOINT ["hugepage-extender"]
# The image runs in a cluster: list and watch it with the pod's service account
# (serve needs a source; the chart passes its own arguments).
CMD ["serve", "--in-cluster", "--host", "0.0.0.0"]
