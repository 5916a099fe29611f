# correx-sessions ingest: accepts session events over HTTP and produces them to Kafka.
#
# No base image is pulled: scripts/images.sh builds the static binary on the
# host (CGO_ENABLED=0) into the build context with the host's CA bundle, and
# this copies them into an empty image. There is no shell and no /etc/passwd;
# the process runs as 65532:65532. Give it a writable /tmp at run time (a
# tmpfs or a volume) if anything should write there. Configuration comes from
# the CORREX_* environment variables (run the image with -h to list them).
FROM scratch
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY ingest /usr/local/bin/ingest
USER 65532:65532
EXPOSE 8081
ENTRYPOINT ["/usr/local/bin/ingest"]
