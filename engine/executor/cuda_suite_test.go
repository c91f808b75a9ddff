package executor_test

import (
	"testing"

	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/executor/exectest"
)

// TestCUDASuite runs the executor suite on the CUDA executor over each backend: the CPU emulation here, and the
// GPU in the -tags cuda test binary that kernels/cuda/run-device.sh runs.
func TestCUDASuite(t *testing.T) {
	for _, be := range executor.Backends() {
		t.Run(be.Name, func(t *testing.T) {
			exectest.Run(t, func(t *testing.T, o exectest.Options) executor.Executor {
				return be.New(t, suiteModel(t), executor.CUDAOptions{Pool: o.Pool, BlockSize: o.BlockSize,
					MaxBatchedTokens: o.MaxBatchedTokens, Attach: o.Attach, Start: o.Start, Swap: o.Swap})
			})
		})
	}
}
