# redis: Debian's redis-server in an empty image, for the integration suites
# and local runs where no registry can be reached.
#
# scripts/images.sh copies the host's /usr/bin/redis-server (from the Debian
# package redis-server) into the build context together with every shared
# library it links and the dynamic loader, each at its own path (what
# `ldd $(command -v redis-server)` lists). The configuration comes from
# flags: the arguments replace CMD, so `docker run IMAGE --appendfsync always`
# runs with that setting only (repeat the defaults you want to keep). The same
# arguments work with the official `redis` image, whose entrypoint puts
# redis-server in front of arguments that start with "--".
FROM scratch
COPY rootfs/ /
COPY --chown=65532:65532 data /data
USER 65532:65532
WORKDIR /data
VOLUME /data
EXPOSE 6379
ENTRYPOINT ["/usr/bin/redis-server"]
CMD ["--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/data", "--appendonly", "yes", "--appendfsync", "everysec"]
