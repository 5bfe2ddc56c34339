//go:build tools

// Package tools pins the image tool in go.mod and go.sum.
package tools

import _ "github.com/opencontainers/umoci/cmd/umoci"
