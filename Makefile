# booty's build. `make help` lists the targets.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
export CGO_ENABLED := 0

OUT      ?= out
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
GOBUILD  := go build -trimpath -ldflags "$(LDFLAGS)"
# Kernel the initramfs is built for; default: the newest in /boot.
KVER     ?= $(shell ls -1 /boot/vmlinuz-* 2>/dev/null | sed 's,^/boot/vmlinuz-,,' | sort -V | tail -n1)
DEMO     := $(OUT)/demo
# Targets that need system packages first run hack/deps.sh (quick when all is
# installed). Set DEPS= to skip it, e.g. in the Dockerfile.
DEPS     ?= deps

.PHONY: help deps build initramfs iso demo-image debian-image demo demo-one test vet unit e2e bench bench-boot bench-serve bench-fleet clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'
	@echo
	@echo 'BOOTY_QEMU_ACCEL=auto|kvm|tcg  accelerator of every QEMU of demo and e2e (default auto:'
	@echo '                               KVM only when a probe guest runs under it, else TCG)'

deps: ## install build and test dependencies (apt-get; needs root)
	bash hack/deps.sh

build: ## static binaries out/booty, out/bootyd and out/bootyctl (the operator's CLI)
	@mkdir -p $(OUT)
	$(GOBUILD) -o $(OUT)/booty ./cmd/booty
	$(GOBUILD) -o $(OUT)/bootyd ./cmd/bootyd
	$(GOBUILD) -o $(OUT)/bootyctl ./cmd/bootyctl

initramfs: $(DEPS) build ## out/vmlinuz and out/initramfs.img (booty as /init, modules for KVER)
	@test -n "$(KVER)" || { echo "no kernel in /boot: run 'make deps' (installs linux-image-amd64) or set KVER" >&2; exit 1; }
	go run ./initramfs --kernel-version $(KVER) --booty $(OUT)/booty \
		--out $(OUT)/initramfs.img --kernel-out $(OUT)/vmlinuz

iso: initramfs ## out/booty.iso: BIOS+UEFI bootable ISO of the agent (virtual media)
	bash hack/mkiso.sh $(OUT)/vmlinuz $(OUT)/initramfs.img $(OUT)/booty.iso

demo-image: $(DEPS) ## the small GPT demo image in out/demo (raw, zst, gz, xz, SHA256SUMS)
	bash hack/mkdemoimage.sh $(DEMO)

demo: $(DEPS) initramfs debian-image ## the fleet demo: two QEMU machines behind IPMI and Redfish BMCs, provisioned by bootyd's reconciler, with bootyctl machines watch (DEMO_FLAGS=--help)
	BOOTY_KERNEL=$(abspath $(OUT))/vmlinuz go run ./hack/fleetdemo --bootyd $(OUT)/bootyd --bootyctl $(OUT)/bootyctl \
		--kernel $(OUT)/vmlinuz --initrd $(OUT)/initramfs.img --image-dir $(BOOTY_CACHE)/debian $(DEMO_FLAGS)

demo-one: $(DEPS) initramfs demo-image ## boot one QEMU machine and provision it from an in-process bootyd, showing its console
	BOOTY_KERNEL=$(abspath $(OUT))/vmlinuz go run ./hack/demo --kernel $(OUT)/vmlinuz --initrd $(OUT)/initramfs.img --image-dir $(DEMO)

vet: ## go vet, with and without the e2e tag
	go vet ./...
	go vet -tags e2e ./...

unit: ## unit tests
	go test -count=1 ./...

# The bootable Debian image the installed-OS tests provision: built with
# debootstrap once (about 8 minutes cold), cached outside the clone.
BOOTY_CACHE ?= /var/cache/booty
export BOOTY_CACHE
debian-image: $(DEPS) ## the bootable Debian test image, cached in BOOTY_CACHE/debian
	bash hack/mkdebianimage.sh $(BOOTY_CACHE)/debian

e2e: initramfs demo-image debian-image ## QEMU end-to-end tests (KVM when a probe guest runs under it, TCG otherwise)
	BOOTY_KERNEL=$(CURDIR)/$(OUT)/vmlinuz BOOTY_INITRD=$(CURDIR)/$(OUT)/initramfs.img BOOTY_DEMO=$(CURDIR)/$(DEMO) \
	BOOTY_BIN=$(CURDIR)/$(OUT)/booty BOOTY_DEBIAN=$(BOOTY_CACHE)/debian \
		go test -count=1 -tags e2e -timeout 45m -v ./test/... ./pkg/initsys/...

test: $(DEPS) vet unit e2e ## everything CI runs: vet, unit tests, end-to-end tests

bench: build bench-image ## out/bench/report.md: booty write-image vs curl|zstd|dd and bmaptool, with floors (root; docs/bench.md)
	go run ./hack/bench --booty $(OUT)/booty --out $(OUT)/bench $(BENCHFLAGS)

bench-boot: $(DEPS) initramfs demo-image ## out/bench/boot.md: the demo's boot phases from its console, TCG (+KVM when it works), median of 5, a few minutes (root; docs/bench.md)
	go run ./hack/benchboot --kernel $(OUT)/vmlinuz --initrd $(OUT)/initramfs.img --image-dir $(DEMO) --out $(OUT)/bench $(BENCHBOOTFLAGS)

bench-serve: $(DEPS) build ## out/bench/serve.md: bootyd vs nginx, 50 Range clients then 50 agents at once, a few minutes (docs/bench.md)
	go run ./hack/benchserve --bootyd $(OUT)/bootyd --out $(OUT)/bench $(BENCHSERVEFLAGS)

bench-fleet: $(DEPS) build ## out/bench/fleet.md: bootyd under 10,000 simulated agents, SQLite and two replicas on PostgreSQL, then growing fleets (docs/bench.md)
	go run ./hack/benchfleet --bootyd $(OUT)/bootyd --out $(OUT)/bench $(BENCHFLEETFLAGS)

.PHONY: bench-image
bench-image: ## the bench images (4 GiB sparse GPT, 1 GiB dense), built once, cached in BOOTY_CACHE (default /var/cache/booty)
	bash hack/mkbenchimage.sh

clean:
	rm -rf $(OUT)
