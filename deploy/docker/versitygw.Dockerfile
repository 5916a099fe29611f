# An S3-compatible server for the integration suites' archive scenario:
# versitygw (github.com/versity/versitygw, an S3 gateway over a directory),
# serving the bucket correx-archive from /data on port 7070, with the
# suites' test credentials. Not for production: it is how the suites get a
# real S3 API without pulling an image.
#
# No base image is pulled: scripts/images.sh builds the static binary on the
# host (CGO_ENABLED=0, go install from the Go module proxy) into the build
# context with an empty bucket directory, and this copies them into an empty
# image.
FROM scratch
COPY versitygw /usr/local/bin/versitygw
COPY --chown=65532:65532 data /data
USER 65532:65532
EXPOSE 7070
ENTRYPOINT ["/usr/local/bin/versitygw", "--access", "correx-it", "--secret", "correx-it-secret", "--region", "us-east-1", "--port", ":7070", "posix", "/data"]
