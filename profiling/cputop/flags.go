package cputop

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
)

// Flags are the --cpuprofile and --memprofile flags that long commands take, and --pprof-top, which summarizes
// the CPU profile (WriteTop) when the command ends.
type Flags struct {
	CPU, Mem string
	Top      int
}

// Register adds the flags to fs.
func (p *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&p.CPU, "cpuprofile", "", "write a CPU profile (runtime/pprof) to `file`")
	fs.StringVar(&p.Mem, "memprofile", "", "write a heap profile (runtime/pprof) to `file` at the end")
	fs.IntVar(&p.Top, "pprof-top", 0, "at the end, print the `N` functions with the most flat and cumulative time of --cpuprofile on stderr")
}

// Check reports flags that do not go together.
func (p *Flags) Check() error {
	switch {
	case p.Top < 0:
		return fmt.Errorf("--pprof-top=%d, want 0 or more", p.Top)
	case p.Top > 0 && p.CPU == "":
		return errors.New("--pprof-top needs --cpuprofile")
	}
	return nil
}

// Start starts the CPU profile if one was asked for; stop ends it, prints its --pprof-top summary on w and writes
// the heap profile.
func (p *Flags) Start(w io.Writer) (stop func() error, err error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	var cpuFile *os.File
	if p.CPU != "" {
		if cpuFile, err = create(p.CPU); err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(cpuFile); err != nil {
			cpuFile.Close()
			return nil, fmt.Errorf("--cpuprofile %s: %w", p.CPU, err)
		}
	}
	return func() error {
		if cpuFile != nil {
			pprof.StopCPUProfile()
			if err := cpuFile.Close(); err != nil {
				return err
			}
			if p.Top > 0 {
				if err := WriteTop(w, p.CPU, p.Top); err != nil {
					return fmt.Errorf("--pprof-top: %w", err)
				}
			}
		}
		if p.Mem == "" {
			return nil
		}
		f, err := create(p.Mem)
		if err != nil {
			return err
		}
		runtime.GC()
		if err := pprof.WriteHeapProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("--memprofile %s: %w", p.Mem, err)
		}
		return f.Close()
	}, nil
}

// create creates path, and its directory.
func create(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return os.Create(path)
}
