package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/morphlab/morphlab/profiling/cputop"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Helpers that subcommands share: JSON and table output, a progress bar, output files and profiling flags.

// writeJSON writes v to w as indented JSON with a final newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// checkPlotName accepts a file name whose extension gonum/plot writes.
func checkPlotName(name string) error {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".png", ".svg", ".pdf":
		return nil
	}
	return usagef("--plot %s: want a .png, .svg or .pdf file name", name)
}

// createFile creates path and its parent directories.
func createFile(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return os.Create(path)
}

// progress is a progress bar (github.com/schollz/progressbar) on a terminal and nothing elsewhere, so that piped
// or logged output stays clean. Commands make one with newProgress (a count of steps) or newBytesProgress (bytes),
// call set as work advances and clear before other output and at the end. A nil bar is off.
type progress struct {
	bar   *progressbar.ProgressBar
	total int // the bar's current end, -1 for none
}

// newProgress returns a bar labelled label that counts steps on w, drawn only when w is a terminal.
func newProgress(w io.Writer, label string) *progress {
	return makeProgress(w, label, false)
}

// newBytesProgress returns a bar that counts bytes (with a rate), drawn only when w is a terminal.
func newBytesProgress(w io.Writer, label string) *progress {
	return makeProgress(w, label, true)
}

func makeProgress(w io.Writer, label string, bytes bool) *progress {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return &progress{}
	}
	return drawProgress(w, label, bytes)
}

// drawProgress returns a bar that draws on w whatever w is.
func drawProgress(w io.Writer, label string, bytes bool) *progress {
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(label),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(50 * time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetPredictTime(false),
	}
	if bytes {
		opts = append(opts, progressbar.OptionShowBytes(true), progressbar.OptionShowTotalBytes(true), progressbar.OptionUseIECUnits(true))
	} else {
		opts = append(opts, progressbar.OptionShowCount())
	}
	return &progress{bar: progressbar.NewOptions(-1, opts...), total: -1}
}

// set moves the bar to done of total; a total of 0 or less shows a count without an end.
func (p *progress) set(done, total int) {
	if p == nil || p.bar == nil {
		return
	}
	if total <= 0 {
		total = -1
	}
	if total != p.total {
		p.bar.ChangeMax(total)
		p.total = total
	}
	p.bar.Set(done)
}

// clear erases the bar, before other output or at the end.
func (p *progress) clear() {
	if p == nil || p.bar == nil {
		return
	}
	p.bar.Clear()
}

// profileFlags are the --cpuprofile and --memprofile flags that long commands take, and --pprof-top, which
// summarizes the CPU profile when the command ends.
type profileFlags struct {
	cpu, mem string
	top      int
}

func (p *profileFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.cpu, "cpuprofile", "", "write a CPU profile (runtime/pprof) to `file`")
	fs.StringVar(&p.mem, "memprofile", "", "write a heap profile (runtime/pprof) to `file` at the end")
	fs.IntVar(&p.top, "pprof-top", 0, "at the end, print the `N` functions with the most flat and cumulative time of --cpuprofile on stderr")
}

// start starts the CPU profile if one was asked for; stop ends it, prints its --pprof-top summary on w and writes
// the heap profile.
func (p *profileFlags) start(w io.Writer) (stop func() error, err error) {
	if p.top < 0 {
		return nil, usagef("--pprof-top=%d, want 0 or more", p.top)
	}
	if p.top > 0 && p.cpu == "" {
		return nil, usagef("--pprof-top needs --cpuprofile")
	}
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
			if p.top > 0 {
				if err := cputop.WriteTop(w, p.cpu, p.top); err != nil {
					return fmt.Errorf("--pprof-top: %w", err)
				}
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
