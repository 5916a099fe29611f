package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"testing"
)

// TestMain builds the devstack where `make run` builds it, before the tests
// run, when TestMakeRunStopsWithStatusZero is selected: the make target's
// own go build then finds the binary up to date, and the test's deadline
// measures the stack coming up, not a compile on a busy machine.
func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Short() && makeRunSelected() {
		cmd := exec.Command("go", "build", "-o", "../../.devstack/bin/devstack", ".")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build of the devstack: %v\n%s", err, out)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

func makeRunSelected() bool {
	p := flag.Lookup("test.run").Value.String()
	if p == "" {
		return true
	}
	re, err := regexp.Compile(p)
	return err != nil || re.MatchString("TestMakeRunStopsWithStatusZero")
}
