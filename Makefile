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

.PHONY: build test deps vet fmt-check staticcheck rules-check bench bench-full bench-deps chaos man completions release-check fuzz

# build writes bin/leasectl and, beside it, the small watchdog program every
# run starts (docs/design.md §6.1); a leasectl with no leasectl-watchdog beside
# it (`go install`) re-executes itself instead, at four times the memory.
build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/leasectl .
	$(GO) build -trimpath -ldflags '-s -w' -o bin/leasectl-watchdog ./cmd/leasectl-watchdog

# deps installs the servers the tests start on their own loopback ports,
# redis-cli (Debian's redis-tools), which forms the test Redis Clusters,
# etcd with etcdctl (etcd-server, etcd-client) for the etcd store's tests, and
# PostgreSQL (initdb and postgres live in /usr/lib/postgresql/*/bin, off PATH),
# chromium, the headless browser the on-call page's tests drive, and
# promtool (Debian's prometheus), which checks the shipped alerting rules.
deps:
	@command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 || { \
		echo "installing redis-server and redis-tools"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null; }
	@command -v etcd >/dev/null 2>&1 && command -v etcdctl >/dev/null 2>&1 || { \
		echo "installing etcd-server and etcd-client"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server etcd-client >/dev/null; }
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || { \
		echo "installing postgresql"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }
	@command -v pgbouncer >/dev/null 2>&1 || { \
		echo "installing pgbouncer"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null; }
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing chromium"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	@command -v promtool >/dev/null 2>&1 || { \
		echo "installing prometheus (for promtool)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null; }

vet:
	$(GO) vet ./...

# fmt-check fails when a Go file is not as gofmt writes it, with the gofmt of
# the Go that builds (another release may format differently).
GOFMT := $(shell $(GO) env GOROOT)/bin/gofmt
fmt-check:
	@files=$$($(GOFMT) -l .) || exit 1; \
	if [ -n "$$files" ]; then echo "gofmt: not formatted (run gofmt -w on them):"; echo "$$files"; exit 1; fi

# staticcheck is pinned so that every machine runs the same checks: a newer
# release adds checks, which would fail `make test` with no change here.
# Installed into bin/ on first use, never from PATH.
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK := $(CURDIR)/bin/staticcheck-$(STATICCHECK_VERSION)/staticcheck

$(STATICCHECK):
	GOBIN=$(dir $@) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

staticcheck: $(STATICCHECK)
	$(STATICCHECK) ./...

# rules-check checks the shipped Prometheus rules (packaging/prometheus)
# and runs their unit tests: each alert fires on the reaper's series, and
# only then.
rules-check:
	promtool check rules packaging/prometheus/leasectl.rules.yml
	cd packaging/prometheus && promtool test rules leasectl.rules.test.yml

# The race detector needs cgo; everything else stays static. The tests
# include the package init budget (internal/initbudget).
test: deps fmt-check vet staticcheck rules-check
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 20m ./...

# bench prints the figures of docs/design.md §8 that say what a run costs
# (start-up, CPU, memory, handoffs, failover, fail-fast, fence checks, run
# and durable writes on etcd, slots and FIFO waiting) and what a fleet costs
# the registry, as `name value unit # target`, each beside its floor measured
# in the same run (flock(1), an empty Go binary, a bare go-redis SET NX,
# etcdctl lock, a bare net/http server over TLS), and how long it took:
# about three minutes. bench-full adds the rest (store, topology, etcd
# faults, hedging, PostgreSQL, the reaper's pass, FIFO on every store):
# 10 to 15 minutes. etcd is installed on
# first use; if it cannot be, its lines are skipped.
bench: deps bench-deps
	$(GO) run ./bench

bench-full: deps bench-deps
	$(GO) run ./bench -full

# bench-deps installs what only the bench uses: etcd for its reference
# figures, and GNU time, which reads the peak memory of the floor commands.
bench-deps:
	@test -x /usr/bin/time || { \
		echo "# installing GNU time for the memory floors"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time; } >/dev/null 2>&1 \
		|| echo "# GNU time could not be installed: the memory floors are skipped"; }
	@command -v etcd >/dev/null 2>&1 && command -v etcdctl >/dev/null 2>&1 || { \
		echo "# installing etcd-server and etcd-client for the reference figures"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server etcd-client; } >/dev/null 2>&1 \
		|| echo "# etcd-server/etcd-client could not be installed: the etcd lines are skipped"; }

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
# fails unless the amd64 deb holds the binary and its watchdog, the reaper's and the
# registry's units and their config, the completions and every man page.
# Not part of `make test`: it takes minutes.
release-check: $(GORELEASER)
	$(GORELEASER) check
	$(GORELEASER) release --snapshot --clean
	dpkg-deb -c dist/*amd64.deb | tee dist/deb-contents.txt
	@for f in /usr/bin/leasectl /usr/bin/leasectl-watchdog /usr/lib/systemd/system/leasectl-reaper.service \
		/etc/leasectl/leasectl.env /usr/lib/systemd/system/leasectl-registry.service \
		/etc/leasectl/registry.env /etc/leasectl/registry.tokens /usr/share/bash-completion/completions/leasectl \
		/usr/share/zsh/vendor-completions/_leasectl /usr/share/fish/vendor_completions.d/leasectl.fish \
		/usr/share/leasectl/prometheus/leasectl.rules.yml /usr/share/leasectl/grafana/leasectl.json \
		$$(cd gen/man && ls *.1.gz | sed 's|^|/usr/share/man/man1/|'); do \
		grep -q " \.$$f$$" dist/deb-contents.txt || { echo "release-check: $$f is missing from the deb" >&2; exit 1; }; \
	done
	@echo "release-check: the deb holds the binary, the units, their config, the completions and $$(ls gen/man | wc -l) man pages"
