package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// chaosFaults is how many faults a chaos run lands: CORREX_CHAOS_FAULTS,
// 4 unless set (make chaos sets more, with more runs).
func chaosFaults(t *testing.T) int {
	t.Helper()
	v := os.Getenv("CORREX_CHAOS_FAULTS")
	if v == "" {
		return 4
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("CORREX_CHAOS_FAULTS=%q: want a positive number of faults", v)
	}
	return n
}

// TestChaos runs the services as processes (the broker, ingest, the query
// service, a projector, redis-server) under a verified load of 1,000
// sessions a fault through ingest (3,000 at least), and lands a
// seeded schedule of faults drawn from every kind at once, back to back
// while the load is sent:
//
//   - the projector killed (SIGKILL) and restarted;
//   - Redis emptied (FLUSHALL);
//   - the projector stopped (SIGSTOP) for 0.2-1.5 s, then continued;
//   - redis-server stopped (SIGSTOP) for 0.2-1 s, then continued: every
//     write and read of every service hangs meanwhile.
//
// Between two faults the run goes on for 0-0.5 s. Once the load ends and
// every checkpoint reached the log's end, every session must be exact, as
// in TestRedisLossAcrossProjectorKills: stored as the fold of what ingest
// acknowledged, byte for byte, nothing else stored, and the query service
// answering each as that fold; and the background verifier of every
// projector process must have reported no mismatch (verifierSilent).
//
// make test runs one seed with 4 faults; make chaos runs
// CORREX_LOSS_RUNS seeds (default 5) with CORREX_CHAOS_FAULTS faults
// (default 12). CORREX_LOSS_SEED replays a run: each run logs its seed
// and its schedule. The archive's outages (S3 refusing and hung) and a
// stalled owner beside a second projector have their own process tests
// (TestArchiveOutageAcrossProcesses, TestStalledOwnerAcrossProcesses).
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the services and runs them as processes")
	}
	t.Parallel() // its own processes and redis-server: beside the other process tests
	runs, seed, faults := lossRuns(t), lossSeed(t), chaosFaults(t)
	bin := buildServices(t, "kafkabroker", "ingest", "projector", "query")
	exact := 0
	for i := range runs {
		s := seed + uint64(i)
		if t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) {
			// A load long enough for every fault to land while it is sent.
			lossRun(t, bin, s, false, max(lossSessions, 1000*faults), func(t *testing.T, ls *lossStack, rng *rand.Rand) string {
				return chaos(t, ls, rng, faults)
			})
		}) {
			exact++
		}
	}
	t.Logf("chaos: exact in %d of %d runs (seeds %d to %d, %d faults each)", exact, runs, seed, seed+uint64(runs)-1, faults)
}

// chaos lands n faults drawn by rng, and returns the schedule.
func chaos(t *testing.T, s *lossStack, rng *rand.Rand, n int) string {
	ctx := context.Background()
	var steps []string
	for range n {
		switch rng.IntN(4) {
		case 0:
			s.restartProjector(t)
			steps = append(steps, "projector killed and restarted")
		case 1:
			if err := s.rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			steps = append(steps, "FLUSHALL")
		case 2:
			if err := s.proj.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			d := s.pause(rng, 200, 1500)
			if err := s.proj.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			steps = append(steps, "projector stopped "+d)
		case 3:
			if err := s.primary.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			d := s.pause(rng, 200, 1000)
			if err := s.primary.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			steps = append(steps, "redis-server stopped "+d)
		}
		steps = append(steps, s.pause(rng, 0, 500))
	}
	return strings.Join(steps, ", ")
}
