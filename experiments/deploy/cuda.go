//go:build cuda

package deploy

import (
	"sync"

	"github.com/morphlab/morphlab/engine/executor"
	kcuda "github.com/morphlab/morphlab/kernels/cuda"
	"github.com/morphlab/morphlab/quant"
)

var (
	gpuOnce sync.Once
	gpu     *kcuda.Device
	gpuErr  error
)

// startCUDA builds the CUDA executor of the loaded deployment on GPU 0 (opened once a process): its pool the
// deployment's blocks or bytes or, without them, its utilization (0.9 by default) of the GPU's memory; swaps
// overlap the steps unless BlockingSwaps.
func (l *Loaded) startCUDA(start []quant.Format) (executor.Executor, error) {
	gpuOnce.Do(func() { gpu, gpuErr = kcuda.Open(0) })
	if gpuErr != nil {
		return nil, gpuErr
	}
	d := l.Deployment
	pool := l.pool()
	if d.KV.Blocks == 0 && d.Memory == 0 {
		u := d.MemoryUtilization
		if u == 0 {
			u = DefaultMemoryUtilization
		}
		pool = executor.Pool{Bytes: int64(u * float64(gpu.Memory))}
	}
	return executor.NewCUDA(gpu, l.Weights, executor.CUDAOptions{Pool: pool, BlockSize: d.KV.BlockSize,
		MaxBatchedTokens: d.Scheduler.MaxBatchedTokens, Start: start, Overlap: !d.BlockingSwaps})
}
