//go:build cuda

package executor_test

import (
	"testing"

	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/executor/exectest"
)

func TestCUDASuite(t *testing.T) {
	exectest.Run(t, func(t *testing.T, o exectest.Options) executor.Executor {
		e, err := executor.NewCUDA(executor.TestDevice(t), suiteModel(t), executor.CUDAOptions{Pool: o.Pool,
			BlockSize: o.BlockSize, MaxBatchedTokens: o.MaxBatchedTokens, Attach: o.Attach, Start: o.Start, Swap: o.Swap})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		return e
	})
}
