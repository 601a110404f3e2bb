# botrun and the example bot in a small image: non-root, SQLite in /data.
#
#   docker build -t botrun .
#   docker run -p 8080:8080 -v botrun-data:/data botrun
#
# Your own bot: build this image, then FROM it, COPY your bot.wasm and
# bot.toml to /app (docs/operations.md, "Deploying").
FROM golang:1.26 AS build
WORKDIR /src
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/botrun ./cmd/botrun \
 && cd examples/echo \
 && GOOS=wasip1 GOARCH=wasm GOWORK=off CGO_ENABLED=0 go build -trimpath -buildmode=c-shared -o /out/bot.wasm . \
 && mkdir -m 0700 /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/botrun /usr/local/bin/botrun
COPY --from=build /out/bot.wasm /app/bot.wasm
COPY deploy/docker/bot.toml /app/bot.toml
# The journals live here: mount a volume, or every restart starts empty.
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
VOLUME /data
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/botrun"]
CMD ["/app/bot.toml"]
