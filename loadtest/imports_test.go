package loadtest

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// loadtest drives brokers from outside, so that it measures Strata exactly
// as it measures its peers: none of its non-test files may import another
// Strata package. (Tests may, to run the acceptance suite against an
// in-process broker.)
func TestImportsNoServerPackage(t *testing.T) {
	for _, dir := range []string{".", "loadtesttest"} {
		paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range paths {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if strings.HasPrefix(p, "strata/") && p != "strata/loadtest" && !strings.HasPrefix(p, "strata/loadtest/") {
					t.Errorf("%s imports %s", path, p)
				}
			}
		}
	}
}
