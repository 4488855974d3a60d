# syntax=docker/dockerfile:1
# Build: docker build -t autoscaled:dev .   (context trimmed by .dockerignore)
# The build stage needs nothing but cargo: protos compile with protox (no protoc). The release
# profile carries no debug info and the binary is stripped. Only the server package is built
# (`-p autoscaled`): `autoscalectl` and its plotting, conformance and recording code stay out
# of the image (scripts/check-server-binary.sh checks the binary for them).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY proto ./proto
COPY src ./src
COPY benches ./benches
COPY crates ./crates
RUN cargo build --release --locked -p autoscaled --bin autoscaled \
    && strip target/release/autoscaled

FROM debian:bookworm-slim
# tini reaps and forwards SIGTERM so the server's graceful drain runs.
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini=0.19.* \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/autoscaled autoscaled \
    && mkdir -p /var/lib/autoscaled \
    && chown autoscaled /var/lib/autoscaled
COPY --from=build /src/target/release/autoscaled /usr/local/bin/autoscaled
USER 10001
VOLUME ["/var/lib/autoscaled"]
EXPOSE 50051
ENV AUTOSCALED_LISTEN=0.0.0.0:50051 \
    AUTOSCALED_DATA_DIR=/var/lib/autoscaled
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/autoscaled"]
CMD ["serve"]
