package client

// The generator's version is pinned here, in the one line that runs it, and
// not in go.mod: `go run pkg@version` builds oapi-codegen with its own
// go.mod, so its dependencies (an older kin-openapi than the gateway's)
// neither enter our module graph nor get upgraded under it.
// TestGeneratedCodeIsCurrent runs this same line.

//go:generate go run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2 -config cfg.yaml -o lockgateway.gen.go ../openapi.yaml
