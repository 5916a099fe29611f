// Package godeps checks, from a test, which packages a package links: it
// asks the go command (go list -deps) for the package's dependencies
// outside the standard library and fails the test for any that its rules
// do not allow. It keeps a library's or a binary's dependencies as small
// as its README says they are.
package godeps

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Rules say which import paths a package may depend on. A rule is an
// import path and covers the packages under it ("go.opentelemetry.io/otel"
// covers "go.opentelemetry.io/otel/trace"). Deny wins over Allow; a nil
// Allow allows whatever Deny does not name.
type Rules struct {
	Allow []string
	Deny  []string
}

// Check fails t for each dependency of pkg (an import path or a relative
// "./..." path as the go command reads it) outside the standard library
// that the rules refuse, naming a package of the graph that imports it. It
// does not count pkg's tests.
func Check(t testing.TB, pkg string, r Rules) {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps",
		"-f", "{{if not .Standard}}{{.ImportPath}} {{join .Imports \" \"}}{{end}}", pkg).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	importer := map[string]string{}
	var deps []string
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		deps = append(deps, f[0])
		for _, imp := range f[1:] {
			if _, ok := importer[imp]; !ok {
				importer[imp] = f[0]
			}
		}
	}
	if len(deps) == 0 {
		t.Fatalf("go list -deps %s listed nothing", pkg)
	}
	slices.Sort(deps)
	for _, d := range deps {
		if covered(d, r.Deny) || (r.Allow != nil && !covered(d, r.Allow)) {
			t.Errorf("%s depends on %s (imported by %s)", pkg, d, importer[d])
		}
	}
}

// covered reports whether path is one of rules or under one of them.
func covered(path string, rules []string) bool {
	for _, r := range rules {
		if path == r || strings.HasPrefix(path, r+"/") {
			return true
		}
	}
	return false
}

// CheckImports fails t for each package that pkg imports directly (not
// counting its tests) and the rules refuse: a rule on who may import a
// package, where Check is a rule on what a program links.
func CheckImports(t testing.TB, pkg string, r Rules) {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{join .Imports \"\\n\"}}", pkg).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list %s: %v\n%s", pkg, err, ee.Stderr)
		}
		t.Fatalf("go list %s: %v", pkg, err)
	}
	for imp := range strings.Lines(string(out)) {
		imp = strings.TrimSpace(imp)
		if imp == "" {
			continue
		}
		if covered(imp, r.Deny) || (r.Allow != nil && !covered(imp, r.Allow)) {
			t.Errorf("%s imports %s", pkg, imp)
		}
	}
}
