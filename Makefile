# moat's build. Every target installs what it needs on a Debian machine with Go.
SHELL := /bin/bash
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PKGS := libseccomp-dev pkg-config iproute2 curl git python3 wrk bsdutils
BIN := bin/moat

.PHONY: deps build demo test unit e2e bench fuzz lint

# deps installs the system packages: libseccomp (cgo) and the real clients
# the e2e tests drive. It skips apt when everything is present.
deps:
	@missing=$$(for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $$missing; \
	fi

build: deps
	go build -o $(BIN) ./cmd/moat

# demo is the main job on the built-in default policy: a command in the
# sandbox, writing to the workspace, refused the network.
demo: build
	$(BIN) run --report -- sh -c 'echo "hello from inside moat"; touch moat-demo.txt && echo "workspace write: ok"; touch ~/.bashrc 2>/dev/null || echo "~/.bashrc write: refused"; curl -sS -o /dev/null -w "network: CONNECT answered %{http_connect}\n" https://example.org/ || true'
	@rm -f moat-demo.txt

# test runs every test: unit tests, fuzz seed corpora and the e2e suite
# (real binary, real curl/git, upstreams in network namespaces).
test: deps
	go vet ./...
	go test -count=1 -timeout 40m ./...

unit: deps
	go test -count=1 -timeout 10m $$(go list ./... | grep -v /e2e)

e2e: deps
	go test -count=1 -timeout 40m ./e2e/...

bench: build
	go test -run '^$$' -bench . -benchtime 2s ./gateway/policy/ ./ca/ ./gateway/audit/
	MOAT_BIN=$(BIN) bash e2e/bench/run.sh

lint:
	test -z "$$(gofmt -l $$(git ls-files '*.go'))"
	go vet ./...
	GOOS=darwin CGO_ENABLED=0 go vet ./...
