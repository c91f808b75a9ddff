package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
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

// profileFlags are cputop.Flags, whose conflicts are usage errors.
type profileFlags struct{ cputop.Flags }

func (p *profileFlags) start(w io.Writer) (stop func() error, err error) {
	if err := p.Check(); err != nil {
		return nil, usagef("%v", err)
	}
	return p.Start(w)
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
