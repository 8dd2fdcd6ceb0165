// Command coordfigures prints the coordinator's code figures that issue
// #30 tracks, for a source tree (default: the current directory), so that
// two checkouts can be compared side by side:
//
//	go run ./scripts/coordfigures [-root DIR]
//
// It reports, for coordinator/ and coordinator/core (non-test files):
// lines, the largest function (lines, name), the methods on *Coordinator,
// the mutexes declared in coordinator/... (sync.Mutex and sync.RWMutex
// fields and variables) and the comments saying "caller holds".
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

func main() {
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	if err := run(*root); err != nil {
		fmt.Fprintln(os.Stderr, "coordfigures:", err)
		os.Exit(1)
	}
}

var (
	mutex       = regexp.MustCompile(`\bsync\.(RW)?Mutex\b`)
	callerHolds = regexp.MustCompile(`(?i)caller holds`)
)

func run(root string) error {
	for _, dir := range []string{"coordinator", "coordinator/core"} {
		fset := token.NewFileSet()
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil {
			return err
		}
		lines, methods, holds := 0, 0, 0
		var largest int
		var largestName string
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			src, err := os.ReadFile(name)
			if err != nil {
				return err
			}
			lines += bytes.Count(src, []byte("\n"))
			holds += len(callerHolds.FindAll(src, -1))
			f, err := parser.ParseFile(fset, name, src, 0)
			if err != nil {
				return err
			}
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
				if n > largest {
					largest, largestName = n, fn.Name.Name
				}
				if fn.Recv != nil && len(fn.Recv.List) == 1 {
					if star, ok := fn.Recv.List[0].Type.(*ast.StarExpr); ok {
						if id, ok := star.X.(*ast.Ident); ok && id.Name == "Coordinator" {
							methods++
						}
					}
				}
			}
		}
		fmt.Printf("%-17s lines %5d  largest function %3d (%s)  methods on *Coordinator %3d  \"caller holds\" %3d\n",
			dir+"/", lines, largest, largestName, methods, holds)
	}
	mutexes := 0
	err := filepath.WalkDir(filepath.Join(root, "coordinator"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		mutexes += len(mutex.FindAll(src, -1))
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Printf("mutexes declared in coordinator/... (non-test): %d\n", mutexes)
	return nil
}
