package suite

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/internal/datadir"
)

// TestRerunReproduce: every results.json that `morphlab reproduce --quick` writes (each setup, workload and
// policy, simulated: the Azure conversation snippet read from the data directory, or its stand-in drawn, and the
// burst drawn at each setup's capacity) runs again from its own record (deploy.Rerun) to the same results.json,
// events.jsonl and table.md, byte for byte.
func TestRerunReproduce(t *testing.T) {
	if testing.Short() {
		t.Skip("the quick suite on every setup; TestSuite runs a reduced suite's results again")
	}
	opt := Options{Out: t.TempDir(), Quick: true}
	if dir, err := datadir.Dir(); err == nil {
		opt.Data = dir
	}
	r, err := Run(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	if n := rerunAll(t, opt.Out); n != len(r.Cells) || n < 12 {
		t.Errorf("%d results run again, the suite wrote %d", n, len(r.Cells))
	}
}

// rerunAll runs every results.json under dir again and reports each file of a run that differs; it returns how
// many it ran.
func rerunAll(t *testing.T, dir string) int {
	t.Helper()
	again := t.TempDir()
	n := 0
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.Name() != "results.json" {
			return err
		}
		old, err := results.Load(p)
		if err != nil {
			return err
		}
		r, events, err := deploy.Rerun(context.Background(), old)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, filepath.Dir(p))
		out := filepath.Join(again, rel)
		if err := r.Write(out, events); err != nil {
			return err
		}
		for _, name := range []string{"results.json", "events.jsonl", "table.md"} {
			a, errA := os.ReadFile(filepath.Join(filepath.Dir(p), name))
			b, errB := os.ReadFile(filepath.Join(out, name))
			if errA != nil || errB != nil || !bytes.Equal(a, b) {
				t.Errorf("%s/%s differs when run again (%v, %v)", rel, name, errA, errB)
			}
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
