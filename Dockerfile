# Builds the same artifacts as `make build initramfs`: out/booty, out/bootyd,
# out/bootyctl, out/vmlinuz and out/initramfs.img, inside a Debian container.
#
#   docker build -t booty-build .
#   docker run --rm -v "$PWD/out:/artifacts" booty-build  # copies the artifacts to ./out
#   docker build --target bootyd -t bootyd .              # a small image running bootyd
FROM golang:1.26-bookworm AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      linux-image-amd64 kmod ca-certificates make git \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN make build initramfs OUT=/out DEPS=

FROM debian:bookworm-slim AS bootyd
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/bootyd /out/bootyctl /usr/local/bin/
COPY --from=build /out/vmlinuz /out/initramfs.img /srv/booty/files/
EXPOSE 8443
ENTRYPOINT ["/usr/local/bin/bootyd"]
CMD ["--listen", ":8443", "--configs", "/srv/booty/configs", "--files", "/srv/booty/files", "--tls-cert", "/srv/booty/tls/tls.crt", "--tls-key", "/srv/booty/tls/tls.key"]

# Default target: the build stage, whose CMD copies the artifacts out.
FROM build AS artifacts
CMD ["cp", "-a", "/out/.", "/artifacts/"]
