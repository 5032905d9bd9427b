# syntax=docker/dockerfile:1
# The fleetcheck hub image. test/integration/deploy.test.ts runs these same steps outside Docker (every
# RUN line as written, the stages in parallel as BuildKit does) and starts the result, so what is
# shipped is what is tested. Keep RUN lines relative to WORKDIR and the base image tag exact: the test
# checks that the tag's Node version is the one the tests run on (the `node` devDependency).

# etcdutl, the restore agent's etcd tool, from the Go module proxy: the module clusters/bin/etcdutl pins
# the version the tests restore with.
FROM golang:1.26.8-bookworm AS etcdutl
WORKDIR /src
COPY clusters/bin/etcdutl ./
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o out/etcdutl go.etcd.io/etcd/etcdutl/v3

FROM node:24.21.0-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: the `node` devDependency would download a second Node; the image's Node builds.
RUN --mount=type=cache,target=/root/.npm npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY clusters/local-fleet ./clusters/local-fleet
RUN npm run build

FROM node:24.21.0-bookworm-slim AS runtime
ENV NODE_ENV=production
# The tools the restore agent drives (fleetcheck agent restore ...), from Debian bookworm as the base:
# restic, PostgreSQL (server and client), barman-cloud (with boto3 for S3), then etcdutl.
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates restic postgresql barman-cli-cloud python3-boto3 && rm -rf /var/lib/apt/lists/*
COPY --from=etcdutl /src/out/etcdutl /usr/local/bin/etcdutl
WORKDIR /app
COPY package.json package-lock.json ./
# Runtime dependencies only; no install scripts run (none is needed to load them).
RUN --mount=type=cache,target=/root/.npm npm ci --omit=dev --ignore-scripts --no-audit --no-fund
COPY --from=build /app/dist ./dist
# `fleetcheck register` applies the member manifests from deploy/ (found next to dist/).
COPY deploy ./deploy
COPY bin/run-node ./bin/run-node
# Non-root, numeric so Kubernetes can check runAsNonRoot (deploy/hub/deployment.yaml: runAsUser 65532).
USER 65532:65532
EXPOSE 8080
# bin/run-node starts node with the hub's V8 flags: a 16 MiB semi-space, and the collector on the main
# thread where the container has one CPU (ADR 0010).
ENTRYPOINT ["bin/run-node", "--enable-source-maps", "dist/src/cli/main.js"]
CMD ["hub"]
