# kafkabroker: a single-node Kafka-protocol broker (franz-go's kfake, see
# cmd/kafkabroker) for development and the integration suites; not a
# production Kafka.
#
# Built like the service images: scripts/images.sh puts the static binary, the
# host's CA bundle and an empty data directory into the build context. The log
# lives in /var/lib/kfake, a volume: mount a named volume there to keep topics,
# records and committed offsets across container restarts. Set
# KFAKE_ADVERTISED_ADDR to the host:port clients dial (inside a Docker network,
# the container's alias), since clients connect to what metadata advertises.
FROM scratch
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY kafkabroker /usr/local/bin/kafkabroker
COPY --chown=65532:65532 data /var/lib/kfake
ENV KFAKE_LISTEN_ADDR=0.0.0.0:9092 \
    KFAKE_DATA_DIR=/var/lib/kfake
USER 65532:65532
VOLUME /var/lib/kfake
EXPOSE 9092
ENTRYPOINT ["/usr/local/bin/kafkabroker"]
