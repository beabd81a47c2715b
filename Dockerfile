# syntax=docker/dockerfile:1
# The service image: every role of the one binary (`agent-gateway <role>`, see --help).
#
#   docker build -t ghcr.io/agent-gateway/agent-gateway:0.1.0 \
#     --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD) .
#
# Node runs the TypeScript sources directly (type stripping), so there is no compile step: the
# image is the production dependencies plus the source tree. The task sandbox images are in
# runner-image/ (python, node).

ARG NODE_IMAGE=node:24-bookworm-slim

# ---- production dependencies -------------------------------------------------------------
FROM ${NODE_IMAGE} AS deps
WORKDIR /app
# onnxruntime-node's postinstall would fetch CUDA providers from NuGet: skipped (package.json's
# allowScripts denies it too, for the npm versions that read it); its CPU binaries are in the npm
# package.
ENV ONNXRUNTIME_NODE_INSTALL=skip
COPY package.json package-lock.json .npmrc ./
# The production dependencies plus the optional local-model runtime that package.json leaves out
# (`npm run install:local-models`: @huggingface/transformers with onnxruntime-node, for
# MEMORY_EMBEDDINGS_MODEL_DIR), so the image runs local models too. `npm install`, not `npm ci`:
# the runtime is added to the locked tree (--no-save). --omit=dev drops tap, typescript and the
# `node` devDependency. The postinstall (an install summary for a person at a terminal, in
# scripts/, outside this build context) is dropped from this stage's package.json only.
RUN --mount=type=cache,target=/root/.npm \
    npm pkg delete scripts.postinstall \
 && npm install --omit=dev --no-save --no-audit --no-fund --no-update-notifier @huggingface/transformers@4.3.1 \
 && rm -rf node_modules/.cache

# ---- runtime -----------------------------------------------------------------------------
FROM ${NODE_IMAGE} AS runtime
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="agent-gateway" \
      org.opencontainers.image.description="Pay-per-request gateway, Kubernetes job runner and memory service for AI agents (x402 + MPP)" \
      org.opencontainers.image.source="https://github.com/agent-gateway/agent-gateway" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"

# The media role's tools, from Debian: ffmpeg (decoding, MP3 encoding, loudness), fluidsynth and
# the General MIDI soundfont fluid-soundfont-gm (the offline song composer, SOUNDFONT_PATH), and
# espeak-ng (offline speech); chromium (/usr/bin/chromium, CHROMIUM_PATH) for the screenshots of
# the gateway's review snapshots and of scheduler-api's screenshot helper, driven by playwright-core.
# Every role shares the one image, so they are here for all of them.
# --no-install-recommends keeps audio servers and X out; the package lists are not kept.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ffmpeg fluidsynth fluid-soundfont-gm espeak-ng chromium \
 && rm -rf /var/lib/apt/lists/*

# A fixed non-root uid/gid (the chart's securityContext uses 10001); files stay root-owned and
# read-only to it. DATA_DIR is the only place it writes (an emptyDir or volume in Kubernetes).
RUN groupadd --system --gid 10001 agw \
 && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin agw \
 && mkdir -p /var/lib/agent-gateway \
 && chown 10001:10001 /var/lib/agent-gateway

ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    DATA_DIR=/var/lib/agent-gateway \
    HOME=/tmp

WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY package.json package-lock.json ./
COPY bin ./bin
COPY src ./src
COPY controllers ./controllers
# The task bootstrap: the Kubernetes executor ships it to run pods in the per-run ConfigMap.
COPY runner-image/bootstrap ./runner-image/bootstrap

USER 10001:10001
EXPOSE 4020 4021 4022 4023 4024 4025
ENTRYPOINT ["node", "bin/agent-gateway.js"]
CMD ["serve"]
