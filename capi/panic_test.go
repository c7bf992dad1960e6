package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// TestEveryExportRecovers: the first statement of every //export function
// is a deferred recoverTo, recoverToErr or recoverVoid (the panic barrier).
func TestEveryExportRecovers(t *testing.T) {
	fset, files := parseSources(t, parser.ParseComments)
	exports := 0
	for _, file := range files {
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Doc == nil || !hasExport(fn) {
				continue
			}
			exports++
			if !startsWithBarrier(fn) {
				t.Errorf("%s: export %s does not start with the panic barrier (defer recoverTo/recoverToErr/recoverVoid)", fset.Position(fn.Pos()), fn.Name.Name)
			}
		}
	}
	if exports < 70 {
		t.Fatalf("found only %d exports; the scan is broken", exports)
	}
}

// parseSources parses the package's non-test Go files, by file name.
func parseSources(t *testing.T, mode parser.Mode) (*token.FileSet, map[string]*ast.File) {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset, files := token.NewFileSet(), map[string]*ast.File{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		if files[name], err = parser.ParseFile(fset, name, nil, mode); err != nil {
			t.Fatal(err)
		}
	}
	return fset, files
}

func hasExport(fn *ast.FuncDecl) bool {
	for _, c := range fn.Doc.List {
		if c.Text == "//export "+fn.Name.Name {
			return true
		}
	}
	return false
}

func startsWithBarrier(fn *ast.FuncDecl) bool {
	if len(fn.Body.List) == 0 {
		return false
	}
	d, ok := fn.Body.List[0].(*ast.DeferStmt)
	if !ok {
		return false
	}
	var name string
	switch f := d.Call.Fun.(type) {
	case *ast.Ident:
		name = f.Name
	case *ast.IndexExpr:
		if id, ok := f.X.(*ast.Ident); ok {
			name = id.Name
		}
	}
	switch name {
	case "recoverTo", "recoverToErr":
		// The deferred call can only change a named result.
		return fn.Type.Results != nil && len(fn.Type.Results.List[0].Names) == 1
	case "recoverVoid":
		return fn.Type.Results == nil
	}
	return false
}

// TestBarrierTurnsPanicsIntoFailures: a panic below an export becomes the
// export's failure result (and message), instead of aborting the process.
func TestBarrierTurnsPanicsIntoFailures(t *testing.T) {
	f := func() (ret int) {
		defer recoverTo(&ret, -5)
		var m map[string]int
		m["x"] = 1 // panics: assignment to a nil map
		return 0
	}
	if got := f(); got != -5 {
		t.Fatalf("recovered result %d, want -5", got)
	}
	g := func() {
		defer recoverVoid()
		panic("boom")
	}
	g()
}

// TestStorePutWithNullResults: mc_store_put with a NULL results pointer
// (which used to panic inside unsafe.Slice and abort the host) fails with
// an error status.
func TestStorePutWithNullResults(t *testing.T) {
	if got := mc_store_put(0, 1, nil, nil, nil, nil, nil, 0, nil); got >= 0 {
		t.Fatalf("mc_store_put(NULL results) = %d, want a negative status", got)
	}
}

// TestRecoveredPanicIsTheLastError: the barrier records the panic's message
// as the calling thread's last error (mc_last_error).
func TestRecoveredPanicIsTheLastError(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	got := func() (ret int) {
		defer recoverTo(&ret, -7)
		panic("boom at the ABI")
	}()
	if got != -7 {
		t.Fatalf("result %d, want the failure value -7", got)
	}
	p := mc_last_error()
	defer mc_free(unsafe.Pointer(p))
	msg := unsafe.String((*byte)(unsafe.Pointer(p)), cStrlen(unsafe.Pointer(p)))
	if !strings.Contains(msg, "recovered Go panic") || !strings.Contains(msg, "boom at the ABI") {
		t.Fatalf("last error %q", msg)
	}
}
