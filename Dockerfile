# Sluice's container image: a static binary on distroless, as a non-root user.
#
#   docker build -t sluice .
#   docker run -p 15000:15000 -v $PWD/examples:/etc/sluice:ro sluice
#
# The server listens on 15000 (gRPC, HTTP/JSON, /metrics, /readyz, /healthz on
# one port). Every flag can also be set as SLUICE_<FLAG> (SLUICE_REDIS,
# SLUICE_ETCD_ENDPOINTS, …). Checked by cmd/sluice's TestDeployArtifacts; not
# built on the machines that develop Sluice (no container runtime there).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/sluice ./cmd/sluice

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /usr/local/bin/sluice
# envoyproxy/ratelimit's command: the same binary under its name runs `sluice
# envoy-ratelimit`, configured by that service's environment (docs/envoy-gateway.md),
# so a Deployment whose command is /bin/ratelimit (Envoy Gateway's) runs unchanged.
# (A copy: distroless has no shell to make a link.)
COPY --from=build /out/sluice /bin/ratelimit
# distroless's nonroot user (65532); the admin API writes the configuration
# file and FILE.history/ beside it, so mount /etc/sluice writable to use it.
USER 65532:65532
EXPOSE 15000
# No shell or curl in the image: the binary checks its own /readyz.
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/sluice", "health", "--server", "127.0.0.1:15000"]
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["server", "--listen", "0.0.0.0:15000", "--config", "/etc/sluice/config.yaml"]
