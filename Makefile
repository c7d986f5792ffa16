# tpsmon build and test entry points. `make test` is what .ci/run and the
# README run; it builds the real InfluxDB the integration tests use.

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
GOBIN   := $(shell $(GO) env GOPATH)/bin
INFLUXD := $(GOBIN)/influxd

# go-nvml's header marks NVML 13 deprecations; they are not ours to fix.
export CGO_CFLAGS ?= -Wno-deprecated-declarations

.PHONY: build demo test vet influxd clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o tpsmon ./cmd/tpsmon

demo:
	$(GO) run ./cmd/tpsmon demo --duration 30s

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...

test: influxd vet
	$(GO) test -count=1 ./...

influxd: $(INFLUXD)

$(INFLUXD):
	$(GO) install github.com/influxdata/influxdb/cmd/influxd@v1.8.10

clean:
	rm -rf tpsmon dist
