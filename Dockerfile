# moat gateway as a container: a static binary on a distroless base, running
# as a non-root user. The sandbox (moat run) is not part of this image; it is
# built without cgo, so its seccomp stage fails closed here.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/moat ./cmd/moat

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/moat /usr/local/bin/moat
USER nonroot:nonroot
EXPOSE 3128
# Mount settings at /etc/moat/settings.yaml and tokens at /etc/moat/tokens.
ENTRYPOINT ["/usr/local/bin/moat", "gateway"]
CMD ["--listen", "0.0.0.0:3128", "--settings", "/etc/moat/settings.yaml", "--token-file", "/etc/moat/tokens", "--audit", "/dev/stdout"]
