package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestEveryPreambleIncludesTheHeader: every file of the package that uses
// cgo includes cgo.h (and so mooncake.h) in its preamble, which is what
// makes cgo check each //export against its declaration.
func TestEveryPreambleIncludesTheHeader(t *testing.T) {
	h, err := os.ReadFile("cgo.h")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(h), `#include "mooncake.h"`) {
		t.Fatal(`cgo.h does not include "mooncake.h"`)
	}
	_, files := parseSources(t, parser.ParseComments|parser.ImportsOnly)
	cgoFiles := 0
	for f, file := range files {
		for _, d := range file.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.IMPORT || len(g.Specs) != 1 || g.Specs[0].(*ast.ImportSpec).Path.Value != `"C"` {
				continue
			}
			cgoFiles++
			if g.Doc == nil || !strings.Contains(g.Doc.Text(), `#include "cgo.h"`) {
				t.Errorf(`%s: the cgo preamble does not #include "cgo.h"`, f)
			}
		}
	}
	if cgoFiles < 10 {
		t.Fatalf("found only %d cgo files; the scan is broken", cgoFiles)
	}
}

// TestMismatchedExportFailsTheBuild: with cgo.h in the preamble, an export
// whose signature differs from its mooncake.h declaration does not compile,
// and one that matches does (the same file, one parameter apart).
func TestMismatchedExportFailsTheBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two cgo packages")
	}
	capiDir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	build := func(params string) (string, error) {
		dir := t.TempDir()
		src := "package main\n\n// #cgo CFLAGS: -I" + capiDir + "\n// #include \"cgo.h\"\nimport \"C\"\n\n" +
			"//export mc_engine_send_probe\nfunc mc_engine_send_probe(" + params + ") C.int { return 0 }\n\nfunc main() {}\n"
		for name, text := range map[string]string{"go.mod": "module probe\n\ngo 1.22\n", "main.go": src} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", filepath.Join(dir, "probe"), ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "GOFLAGS=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := build("engine C.uint64_t, peer *C.mc_cchar"); err != nil {
		t.Fatalf("an export matching mooncake.h failed to build: %v\n%s", err, out)
	}
	out, err := build("engine C.uint64_t, peer *C.char") // mooncake.h: const char *peer
	if err == nil {
		t.Fatal("an export that drops a const of mooncake.h built")
	}
	if !strings.Contains(out, "conflicting types for") || !strings.Contains(out, "mc_engine_send_probe") {
		t.Fatalf("unexpected build failure:\n%s", out)
	}
}
