# correx-sessions projector: folds session events from Kafka into snapshots in Redis (port: health and metrics only).
#
# No base image is pulled: scripts/images.sh builds the static binary on the
# host (CGO_ENABLED=0) into the build context with the host's CA bundle, and
# this copies them into an empty image. There is no shell and no /etc/passwd;
# the process runs as 65532:65532. Give it a writable /tmp at run time (a
# tmpfs or a volume) if anything should write there. Configuration comes from
# the CORREX_* environment variables (run the image with -h to list them).
FROM scratch
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY projector /usr/local/bin/projector
USER 65532:65532
EXPOSE 8083
ENTRYPOINT ["/usr/local/bin/projector"]
