# One image for both processes:
#   hook server: gunicorn -c hooks/gunicorn_conf.py 'hooks.app:create_app()'   (the default)
#   slurm_sync:  python -m slurm_sync
# Runs as a non-root user and writes nothing outside /tmp and PROMETHEUS_MULTIPROC_DIR, so it works
# with readOnlyRootFilesystem (the charts mount emptyDirs there).
# BASE_IMAGE names another registry's copy of the same base when Docker Hub is not reachable, or the equivalent
# hack/image-base.sh makes from Debian's archive (hack/image.sh picks it then). Nothing here depends on where
# the base keeps python, pip and the console scripts: they are found on its PATH.
ARG BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

# pip's settings for this build only, from the building machine's pip (hack/image.sh); pip ignores them empty.
ARG PIP_INDEX_URL=
ARG PIP_TRUSTED_HOST=
ARG PIP_CERT=

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOOKS_BIND=0.0.0.0:8080

WORKDIR /app

# Exact pins first, so a code change does not reinstall dependencies.
COPY requirements.lock ./
RUN pip install --no-deps -r requirements.lock

COPY hooks/ hooks/
COPY slinky_common/ slinky_common/
COPY slurm_sync/ slurm_sync/
# Byte-compile at build time: the root filesystem is read-only at run time.
RUN python -m compileall -q hooks slinky_common slurm_sync

USER 65532:65532
EXPOSE 8080 8081
CMD ["gunicorn", "-c", "hooks/gunicorn_conf.py", "hooks.app:create_app()"]
