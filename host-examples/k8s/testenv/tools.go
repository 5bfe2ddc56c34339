//go:build tools

// Package tools names the programs this module builds, so that `go mod tidy`
// keeps their dependencies; build.sh builds them with `go build`.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
