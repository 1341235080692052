# Alnair's images (docs/image.md): the exporter, the last stage and so the default target, and the node
# installer, `--target intercept`. BASE is any Debian-based image whose python3 can make a venv: the
# tests build localhost/alnair-base:bookworm with debootstrap; python:3.11-slim-bookworm works as well.
ARG BASE=localhost/alnair-base:bookworm
# pyproject.toml's version; the build stage fails when the wheel it builds has another.
ARG VERSION=0.1.0
ARG SOURCE=""

FROM ${BASE} AS build
ARG VERSION
ENV PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# No compiler: the wheel's build fetches Zig's (PyPI's ziglang, pyproject.toml's build-system) and setup.py runs make
# with it, so libalnair.so needs glibc 2.17 and not this base's.
# No version pins: they would tie the file to one base's suite, and only this stage's outputs are kept.
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends make busybox-static
WORKDIR /src
COPY . .
# pip checks TLS against the system's CA bundle when the base has one or the build mounts one
# (podman build -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro), never a copy.
# The venv moves to the runtime stage whole, at the same path on the same base; pip itself stays here.
RUN ca=/etc/ssl/certs/ca-certificates.crt; if [ -f "$ca" ]; then export PIP_CERT="$ca"; fi; \
    python3 -m venv /opt/alnair \
 && /opt/alnair/bin/pip wheel --no-deps --wheel-dir /dist . \
 && wheel=$(echo /dist/alnair_gpu-"$VERSION"-py3-none-*.whl) \
 && { [ -f "$wheel" ] || { echo "VERSION=$VERSION is not pyproject.toml's version: built $(ls /dist)" >&2; exit 1; }; } \
 && /opt/alnair/bin/pip install --no-compile "${wheel}[exporter,injector]" \
 && /opt/alnair/bin/pip install --no-compile --no-deps --target /rootfs/alnair/python "$wheel" \
 && /opt/alnair/bin/pip uninstall --yes pip setuptools
# The installer's tree: busybox for /install, the library (pip builds in the tree: setup.py only warns when the
# library does not build, since the exporter runs without it, and the cp below then stops the image), and a
# directory to put on PYTHONPATH. Its
# sitecustomize turns the Python intercept on (ALNAIR_PYTHON_INTERCEPT) as alnair_intercept.pth does in
# site-packages, which Python never reads from a PYTHONPATH entry; console scripts name this venv's python.
RUN mkdir -p /rootfs/bin /rootfs/alnair/lib \
 && cp /bin/busybox /rootfs/bin/ \
 && for applet in $(/bin/busybox --list); do ln -s busybox "/rootfs/bin/$applet"; done \
 && cp intercept/build/libalnair.so /rootfs/alnair/lib/ \
 && rm -r /rootfs/alnair/python/bin /rootfs/alnair/python/alnair_intercept.pth \
 && cp intercept/bootstrap/sitecustomize.py /rootfs/alnair/python/ \
 && echo "$VERSION" > /rootfs/alnair/VERSION \
 && cp image/install.sh /rootfs/install

# The node installer: run as root by an init container with a host directory at /host (docs/image.md).
FROM scratch AS intercept
ARG VERSION
ARG SOURCE
LABEL org.opencontainers.image.title="alnair-intercept" \
      org.opencontainers.image.description="Installs Alnair's CUDA intercept library and training-side Python package into a host directory" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="${SOURCE}"
COPY --from=build /rootfs /
CMD ["/install", "/host"]

FROM ${BASE} AS exporter
ARG VERSION
ARG SOURCE
LABEL org.opencontainers.image.title="alnair-exporter" \
      org.opencontainers.image.description="Prometheus exporter for GPU and AI workloads on Kubernetes" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="${SOURCE}"
# A fixed uid and gid, so the chart's runAsUser and runAsGroup can name them.
RUN groupadd --gid 65532 alnair \
 && useradd --no-log-init --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin alnair
COPY --from=build /opt/alnair /opt/alnair
# The root filesystem is read-only in the chart: bytecode could not be written there anyway.
ENV PATH=/opt/alnair/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 9876
ENTRYPOINT ["alnair-exporter"]
