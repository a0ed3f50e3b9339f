# dlm developer tasks.

GO              ?= go
GOBIN           ?= $(shell $(GO) env GOPATH)/bin
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
PROTOC_GEN_CONNECT_GO_VERSION := v1.21.1
SUDO            := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: all lint proto proto-tools test vet

all: vet lint test

## proto: regenerate api/dlmpb from api/dlm.proto
proto: proto-tools
	PATH="$(GOBIN):$$PATH" protoc -I api -I /usr/include \
		--go_out=api/dlmpb --go_opt=paths=source_relative \
		--go-grpc_out=api/dlmpb --go-grpc_opt=paths=source_relative \
		--connect-go_out=api/dlmpb --connect-go_opt=paths=source_relative \
		api/dlm.proto

## proto-tools: install protoc (Debian's protobuf-compiler) and the pinned Go plugins if missing
proto-tools:
	@command -v protoc >/dev/null || { $(SUDO) apt-get update && $(SUDO) apt-get install -y protobuf-compiler; }
	@$(GOBIN)/protoc-gen-go --version 2>/dev/null | grep -q ' $(PROTOC_GEN_GO_VERSION)$$' || \
		$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@$(GOBIN)/protoc-gen-go-grpc --version 2>/dev/null | grep -q ' $(patsubst v%,%,$(PROTOC_GEN_GO_GRPC_VERSION))$$' || \
		$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	@$(GOBIN)/protoc-gen-connect-go --version 2>/dev/null | grep -q '^$(patsubst v%,%,$(PROTOC_GEN_CONNECT_GO_VERSION))$$' || \
		$(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_GO_VERSION)

vet:
	$(GO) vet ./...

## lint: staticcheck, pinned in scripts/lint.sh, over both modules
lint:
	bash scripts/lint.sh

test:
	$(GO) test -race ./...
