package testlint_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/manifold-cni/manifold/hack/testlint"
)

// TestAnalyzer runs the pass on testdata/src: each pattern caught (the
// "// want" comments), the good forms and the marked exceptions passed,
// and a package's own code left to the product's rules.
func TestAnalyzer(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), testlint.Analyzer, "unit", "e2e/harness")
}
