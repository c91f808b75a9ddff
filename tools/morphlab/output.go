package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"golang.org/x/term"
)

// Helpers that subcommands share: JSON and table output, a progress bar, output files and profiling flags.

// writeJSON writes v to w as indented JSON with a final newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes aligned columns: a header row, then rows, flushed by flush.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// formatValue formats a measurement with about four significant digits and no exponent for large values:
// 12345678, 1234, 123.4, 12.35, 1.235, 0.1235.
func formatValue(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1000 || v == 0:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 3, 64)
	default:
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
}

// formatBytes formats a size in binary units: 32 KiB, 1 MiB, 1.5 GiB.
func formatBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return strconv.FormatFloat(v, 'f', -1, 64) + " " + units[i]
}

// createFile creates path and its parent directories.
func createFile(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return os.Create(path)
}

// progress draws a one-line progress bar on a terminal and nothing elsewhere, so that piped or logged output
// stays clean. With a total of 0 it shows a count.
type progress struct {
	w     io.Writer
	draw  bool
	label string
	last  time.Time
}

// newProgress returns a progress bar on w that draws only when w is a terminal.
func newProgress(w io.Writer, label string) *progress {
	f, ok := w.(*os.File)
	return &progress{w: w, draw: ok && term.IsTerminal(int(f.Fd())), label: label}
}

const progressWidth = 30

// set redraws the bar at done of total, at most every 50 ms unless it is the last step.
func (p *progress) set(done, total int) {
	if !p.draw || (done != total && time.Since(p.last) < 50*time.Millisecond) {
		return
	}
	p.last = time.Now()
	if total <= 0 {
		fmt.Fprintf(p.w, "\r\033[K%s %d", p.label, done)
		return
	}
	n := progressWidth * min(done, total) / total
	fmt.Fprintf(p.w, "\r\033[K%s [%s%s] %d/%d", p.label, strings.Repeat("#", n), strings.Repeat(".", progressWidth-n), done, total)
}

// clear erases the bar, before other output or at the end.
func (p *progress) clear() {
	if p.draw {
		fmt.Fprint(p.w, "\r\033[K")
		p.last = time.Time{}
	}
}

// profileFlags are the --cpuprofile and --memprofile flags that long commands take.
type profileFlags struct {
	cpu, mem string
}

func (p *profileFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.cpu, "cpuprofile", "", "write a CPU profile (runtime/pprof) to `file`")
	fs.StringVar(&p.mem, "memprofile", "", "write a heap profile (runtime/pprof) to `file` at the end")
}

// start starts the CPU profile if one was asked for; stop ends it and writes the heap profile.
func (p *profileFlags) start() (stop func() error, err error) {
	var cpuFile *os.File
	if p.cpu != "" {
		if cpuFile, err = createFile(p.cpu); err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(cpuFile); err != nil {
			cpuFile.Close()
			return nil, fmt.Errorf("--cpuprofile %s: %w", p.cpu, err)
		}
	}
	return func() error {
		if cpuFile != nil {
			pprof.StopCPUProfile()
			if err := cpuFile.Close(); err != nil {
				return err
			}
		}
		if p.mem == "" {
			return nil
		}
		f, err := createFile(p.mem)
		if err != nil {
			return err
		}
		runtime.GC()
		if err := pprof.WriteHeapProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("--memprofile %s: %w", p.mem, err)
		}
		return f.Close()
	}, nil
}

// lockedWriter serializes writes to w, for a writer shared with a goroutine (such as a child process's stderr
// copier).
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
