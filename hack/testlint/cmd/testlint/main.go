// Command testlint runs the checks of package testlint (hack/testlint, a
// module of its own, so that golang.org/x/tools stays out of manifold's
// go.mod) as a vet tool. make lint builds it and runs, from the repository's
// root:
//
//	go vet -vettool=bin/testlint ./...
package main

import (
	"golang.org/x/tools/go/analysis/unitchecker"

	"github.com/manifold-cni/manifold/hack/testlint"
)

func main() { unitchecker.Main(testlint.Analyzer) }
