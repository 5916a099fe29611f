package e2e_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// serviceNames are the commands the tests that run the pipeline as
// processes start (TestHostileInputs, TestRedisLossAcrossProjectorKills,
// TestWatchSoak, TestEdgesAcrossProcesses, BenchmarkReadsUnderWrites).
var serviceNames = []string{"kafkabroker", "ingest", "projector", "query"}

// processTests are the tests and benchmarks that run the services as
// processes: TestMain builds the binaries only when -run or -bench selects
// one of them, so that a run of the other tests does not pay for the build.
var processTests = []string{"TestHostileInputs", "TestRedisLossAcrossProjectorKills", "TestWatchSoak", "TestEdgesAcrossProcesses",
	"TestStalledOwnerAcrossProcesses", "TestArchiveOutageAcrossProcesses", "TestChangelogFaultsAcrossProcesses", "TestHugeSessionAcrossProcesses", "TestChaos",
	"BenchmarkReadsUnderWrites"}

// binaries is the one build of the services for this test binary: TestMain
// starts it (in the background, while the in-process tests run) and
// buildServices waits for it.
var binaries struct {
	dir  string
	done chan struct{}
	err  error
}

// startBuild builds every service in serviceNames into dir with one go build
// (the packages compile in parallel and once), in the background, when a
// selected test needs them. It returns a function that removes dir.
func startBuild() (cleanup func()) {
	binaries.done = make(chan struct{})
	if testing.Short() || !processTestSelected() {
		binaries.err = errors.New("the service binaries were not built: TestMain builds them only when -run or -bench selects one of " + fmt.Sprint(processTests) + " (add a new test that runs them to processTests)")
		close(binaries.done)
		return func() {}
	}
	dir, err := os.MkdirTemp("", "correx-e2e-bin-")
	if err != nil {
		binaries.err = err
		close(binaries.done)
		return func() {}
	}
	binaries.dir = dir
	go func() {
		defer close(binaries.done)
		args := []string{"build", "-o", dir + string(filepath.Separator)}
		for _, n := range serviceNames {
			args = append(args, "github.com/correx/sessions/cmd/"+n)
		}
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			binaries.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	}()
	return func() {
		<-binaries.done
		_ = os.RemoveAll(dir)
	}
}

// processTestSelected reports whether -test.run or -test.bench selects a
// test in processTests (by its top-level name, as go test matches).
func processTestSelected() bool {
	for _, f := range []string{"test.run", "test.bench"} {
		fl := flag.Lookup(f)
		if fl == nil {
			continue
		}
		pattern := fl.Value.String()
		if f == "test.run" && pattern == "" {
			pattern = "." // no -run: every test runs
		}
		if pattern == "" {
			continue
		}
		first, _, _ := cutTopLevel(pattern)
		re, err := regexp.Compile(first)
		if err != nil {
			return true // let go test report the pattern; build to be safe
		}
		for _, name := range processTests {
			if (f == "test.bench") != (len(name) > 9 && name[:9] == "Benchmark") {
				continue
			}
			if re.MatchString(name) {
				return true
			}
		}
	}
	return false
}

// cutTopLevel splits a -run pattern at its first unbracketed '/', as go
// test does: the first element matches top-level tests.
func cutTopLevel(p string) (first, rest string, found bool) {
	depth := 0
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '[':
			depth++
		case ']':
			depth--
		case '\\':
			i++
		case '/':
			if depth == 0 {
				return p[:i], p[i+1:], true
			}
		}
	}
	return p, "", false
}

// buildServices answers the paths of the named commands in the test
// binary's one build, waiting for TestMain's build to finish.
func buildServices(t testing.TB, names ...string) map[string]string {
	t.Helper()
	<-binaries.done
	if binaries.err != nil {
		t.Fatal(binaries.err)
	}
	paths := map[string]string{}
	for _, n := range names {
		p := filepath.Join(binaries.dir, n)
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s is not among the built services %v: %v", n, serviceNames, err)
		}
		paths[n] = p
	}
	return paths
}
