//go:build !cuda

package deploy

import (
	"fmt"

	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/quant"
)

// startCUDA fails: this build has no CUDA executor.
func (l *Loaded) startCUDA([]quant.Format) (executor.Executor, error) {
	return nil, fmt.Errorf("deploy: the cuda executor needs a morphlab built with -tags cuda (make device-bundle builds one)")
}
