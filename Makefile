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

.PHONY: build test deps vet bench chaos man completions release-check fuzz

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

# bench prints every figure of DESIGN §8 as `name value unit # target`,
# measured side by side with flock(1) and etcdctl lock in one run (about a
# minute). etcd is installed on first use; if it cannot be, its lines are
# skipped.
bench: deps
	@command -v etcd >/dev/null 2>&1 && command -v etcdctl >/dev/null 2>&1 || { \
		echo "# installing etcd-server and etcd-client for the reference figures"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server etcd-client; } >/dev/null 2>&1 \
		|| echo "# etcd-server/etcd-client could not be installed: the etcd lines are skipped"; }
	$(GO) run ./bench

# chaos runs the fault-injection test (chaos/) for CHAOS_SECONDS (60 by
# default) and prints violations=N holders=M faults=F; `make test` runs it
# for 20 seconds.
CHAOS_SECONDS ?= 60
chaos: deps
	CHAOS_SECONDS=$(CHAOS_SECONDS) $(GO) test -count=1 -v -timeout 15m -run '^TestChaos' ./chaos/

# man writes one gzipped man page per command to gen/man (the packages
# install them in /usr/share/man/man1); `man -l gen/man/leasectl.1.gz`.
man:
	rm -rf gen/man
	$(GO) run ./internal/genman --dir gen/man --version $(VERSION) --date $(DATE)
	gzip -9n gen/man/*.1

# completions writes cobra's bash, zsh and fish scripts to gen/completions.
completions:
	rm -rf gen/completions && mkdir -p gen/completions
	for sh in bash zsh fish; do \
		$(GO) run . completion $$sh > gen/completions/leasectl.$$sh || exit 1; \
	done

# goreleaser v2.16.0 is the newest v2 that builds with our Go and module
# proxy: v2.17 needs go.digitalxero.dev/go-msix (not on the proxy allowed
# here), v2.18 needs Go 1.27. Installed into bin/ on first use, never from PATH.
GORELEASER_VERSION ?= v2.16.0
GORELEASER := $(CURDIR)/bin/goreleaser-$(GORELEASER_VERSION)/goreleaser

$(GORELEASER):
	GOBIN=$(dir $@) $(GO) install github.com/goreleaser/goreleaser/v2@$(GORELEASER_VERSION)

# release-check builds a full snapshot release (nothing is published) and
# fails unless the amd64 deb holds the binary, the reaper unit, its config,
# the completions and every man page. Not part of `make test`: it takes minutes.
release-check: $(GORELEASER)
	$(GORELEASER) check
	$(GORELEASER) release --snapshot --clean
	dpkg-deb -c dist/*amd64.deb | tee dist/deb-contents.txt
	@for f in /usr/bin/leasectl /usr/lib/systemd/system/leasectl-reaper.service \
		/etc/leasectl/leasectl.env /usr/share/bash-completion/completions/leasectl \
		/usr/share/zsh/vendor-completions/_leasectl /usr/share/fish/vendor_completions.d/leasectl.fish \
		$$(cd gen/man && ls *.1.gz | sed 's|^|/usr/share/man/man1/|'); do \
		grep -q " \.$$f$$" dist/deb-contents.txt || { echo "release-check: $$f is missing from the deb" >&2; exit 1; }; \
	done
	@echo "release-check: the deb holds the binary, the unit, its config, the completions and $$(ls gen/man | wc -l) man pages"
