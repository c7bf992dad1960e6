// Package layering_test keeps the module's Go packages in the order of
// DESIGN.md's layer diagram: dependencies point down only. It parses the
// imports of every Go file in the module (every build tag, test files
// included, since a test's import is an arrow too) and fails on any import
// of a project package from a layer above the importer's.
package layering_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/mooncake-go/mooncake"

// layers is DESIGN.md's diagram, top-level directory to rank; a package may
// import only packages of its own rank or below. Directories on one row of
// the diagram (backend/ and ep/) share a rank. benchmarks/ is a side tool
// rather than a layer: it may use any package and none may use it.
var layers = map[string]int{
	"internal":   0,
	"gpu":        1,
	"transfer":   2,
	"kvstore":    3,
	"backend":    4,
	"ep":         4,
	"cmd":        5,
	"capi":       6,
	"benchmarks": 7,
}

// edge is one import of a project package.
type edge struct {
	from, to, file string
}

// projectImports returns every import of a project package in the module
// rooted at root, keyed by the importing file's directory.
func projectImports(t *testing.T, root string) []edge {
	t.Helper()
	var edges []edge
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			// The go command's own rule for what is outside the
			// module's packages, plus nested modules.
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		from := filepath.ToSlash(rel)
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			if p == module || strings.HasPrefix(p, module+"/") {
				edges = append(edges, edge{from: from, to: strings.TrimPrefix(strings.TrimPrefix(p, module), "/"), file: path})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return edges
}

// rank returns the layer of a package directory relative to the module root.
func rank(dir string) (int, bool) {
	top, _, _ := strings.Cut(dir, "/")
	r, ok := layers[top]
	return r, ok
}

// moduleRoot is the directory holding the module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: %v", root, err)
	}
	return root
}

// TestDependenciesPointDown fails when a package imports one from a layer
// above its own (an internal/ package importing anything outside internal/
// among them), or when a package sits in a directory the diagram does not
// place.
func TestDependenciesPointDown(t *testing.T) {
	edges := projectImports(t, moduleRoot(t))
	if len(edges) == 0 {
		t.Fatal("found no imports of project packages; the walk is broken")
	}
	var bad []string
	for _, e := range edges {
		rf, okf := rank(e.from)
		rt, okt := rank(e.to)
		switch {
		case !okf:
			bad = append(bad, e.file+": package "+e.from+" is in no layer of DESIGN.md; add its directory to layers")
		case !okt:
			bad = append(bad, e.file+": imports "+e.to+", which is in no layer of DESIGN.md")
		case rt > rf:
			bad = append(bad, e.file+": "+e.from+" imports "+e.to+", a layer above it")
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
}

// TestInternalImportsOnlyInternal states the ground-floor rule on its own:
// nothing under internal/ imports a project package outside internal/.
func TestInternalImportsOnlyInternal(t *testing.T) {
	n := 0
	for _, e := range projectImports(t, moduleRoot(t)) {
		if e.from != "internal" && !strings.HasPrefix(e.from, "internal/") {
			continue
		}
		n++
		if e.to != "internal" && !strings.HasPrefix(e.to, "internal/") {
			t.Errorf("%s: %s imports %s, outside internal/", e.file, e.from, e.to)
		}
	}
	if n == 0 {
		t.Fatal("no internal/ package imports another; the walk is broken")
	}
}

// TestReplicationKnowsNoStore keeps the master's replicated log apart from
// the master, as etcd's raft is from its server: kvstore/master/replication
// (its tests included) imports nothing of kvstore/, and reaches the master
// only through the StateMachine interface it defines.
func TestReplicationKnowsNoStore(t *testing.T) {
	const pkg = "kvstore/master/replication"
	n := 0
	for _, e := range projectImports(t, moduleRoot(t)) {
		if e.from != pkg {
			continue
		}
		n++
		if e.to == "kvstore" || strings.HasPrefix(e.to, "kvstore/") {
			t.Errorf("%s: %s imports %s", e.file, pkg, e.to)
		}
	}
	if n == 0 {
		t.Fatalf("%s imports no project package; the walk or the path is broken", pkg)
	}
}
