// Package lockgateway holds what belongs to the whole service rather than to
// one of its packages: the OpenAPI contract it serves, and its version.
package lockgateway

import _ "embed"

// OpenAPI is openapi.yaml, byte for byte: the contract served at
// /openapi.yaml and checked against every response in the tests.
//
//go:embed openapi.yaml
var OpenAPI []byte

// Version is the gateway's version, set at build time with
// -ldflags "-X github.com/lockgateway/lockgateway.Version=…".
var Version = "dev"
