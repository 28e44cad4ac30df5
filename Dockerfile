# OAAX toolchain image for onnx-ir-multidevice: converts an ONNX model (or an archive with a
# model and a config.json) into one .omny artifact for a multi-device pipeline, plus its log.
#
#   docker build -t oaax-omny-toolchain:0.1.0 .
#   docker run --rm --network none -v "$PWD:/app/run" oaax-omny-toolchain:0.1.0 \
#       /app/run/model.onnx /app/run/build
#
# Only the build needs the network (pip); the conversion runs offline, as a non-root user.
FROM python:3.11-slim

LABEL org.opencontainers.image.title="oaax-omny-toolchain" \
      org.opencontainers.image.description="OAAX toolchain: ONNX model -> .omny multi-device pipeline artifact" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

COPY pyproject.toml README.md ./
COPY onnx_ir_multidevice ./onnx_ir_multidevice

RUN python -m pip install ".[runtime]" \
    && useradd --create-home --uid 10001 --user-group oaax \
    && mkdir -p /app/run \
    && chown oaax:oaax /app/run

USER oaax

ENTRYPOINT ["omny-oaax-toolchain"]
