# syntax=docker/dockerfile:1
# The lash-restate endpoint: small, non-root, every dependency from the hash-pinned lock.
# Build: docker build -t lash-restate:0.1.0 .    Run: docker run -p 9080:9080 lash-restate:0.1.0
# Refresh the lock after changing dependencies: pip-compile --generate-hashes --strip-extras \
#   --no-emit-index-url --no-emit-find-links --output-file requirements.lock pyproject.toml

FROM python:3.11.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/lash
COPY requirements.lock requirements-build.lock ./
RUN /opt/lash/bin/pip install --require-hashes --no-deps -r requirements.lock -r requirements-build.lock
COPY pyproject.toml README.md LICENSE ./
COPY src ./src
# Built with the pinned backend (an isolated build would fetch setuptools unpinned), then dropped.
RUN /opt/lash/bin/pip install --no-deps --no-build-isolation . && /opt/lash/bin/pip uninstall --yes setuptools

FROM python:3.11.11-slim-bookworm
# The application the endpoint serves: the example checkout (examples/checkout.py). Yours goes here
# instead: copy your module into /opt/app and point LASH_APP at the app lash_restate.app(...) built.
ENV PATH=/opt/lash/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONPATH=/opt/app \
    LASH_APP=examples.checkout:app \
    LASH_HOST=0.0.0.0 \
    LASH_PORT=9080
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin lash
COPY --from=build /opt/lash /opt/lash
COPY examples /opt/app/examples
USER 10001
EXPOSE 9080
# The SDK answers /health without request signing, so the probe works with identity keys on.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('LASH_PORT', '9080'), timeout=2)"]
ENTRYPOINT ["lash-restate"]
CMD ["serve"]
