package deploy

import (
	"os"
	"sync"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor/costmodel"
)

// StepRecorder writes an engine's steps to a steps file as they run (a server's, for 'morphlab calibrate
// --steps' to fit), each as StepSample makes it.
type StepRecorder struct {
	mu   sync.Mutex
	f    *os.File
	w    *costmodel.StepWriter
	err  error
	done bool
}

// RecordSteps creates path and writes every step e runs to it (idle ticks left out) until Close.
func RecordSteps(e *engine.Engine, path string) (*StepRecorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	r := &StepRecorder{f: f, w: costmodel.NewStepWriter(f)}
	e.OnStep(func(info engine.StepInfo) {
		if info.Idle {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if !r.done && r.err == nil {
			r.err = r.w.Write(StepSample(info))
		}
	})
	return r, nil
}

// Close flushes and closes the file; steps after it are dropped.
func (r *StepRecorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done = true
	err := r.err
	if ferr := r.w.Flush(); err == nil {
		err = ferr
	}
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	return err
}
