# leasectl's build and test entry points. Every build is static
# (CGO_ENABLED=0) so that the binary runs on any Linux of the same
# architecture and goreleaser can cross-compile it.
export CGO_ENABLED := 0
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo none)
DATE    ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS := -s -w -X github.com/leasectl/leasectl/cmd.version=$(VERSION) \
	-X github.com/leasectl/leasectl/cmd.commit=$(COMMIT) -X github.com/leasectl/leasectl/cmd.date=$(DATE)

.PHONY: build test deps vet bench chaos man release-check fuzz

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/leasectl .

# deps installs the servers the tests start on their own loopback ports.
deps:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "installing redis-server"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; }

vet:
	$(GO) vet ./...

# The race detector needs cgo; everything else stays static.
test: deps vet
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 20m ./...
