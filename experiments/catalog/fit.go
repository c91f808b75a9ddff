package catalog

import (
	"slices"

	"github.com/morphlab/morphlab/engine/executor/costmodel"
)

// FitSource names the profile the committed efficiencies are fitted to.
const FitSource = "vidur a100 meta-llama/Llama-2-7b-hf mlp.csv, tensor parallel 1, median times"

// FitModel and FitDevice are the model and device the efficiencies are fitted on; every other pair is held out.
const (
	FitModel  = "llama-2-7b"
	FitDevice = "a100"
)

// Refit fits the cost model's efficiencies to Vidur's profile of FitModel on FitDevice, as fitted.json holds them.
// It fails when the profile is absent.
func Refit() (costmodel.Params, error) {
	m, err := ModelByName(FitModel)
	if err != nil {
		return costmodel.Params{}, err
	}
	hw, err := HardwareByName(FitDevice)
	if err != nil {
		return costmodel.Params{}, err
	}
	ms, err := VidurMeasurements(m, hw)
	if err != nil {
		return costmodel.Params{}, err
	}
	return costmodel.Fit(ms)
}

// CheckedOps are the operators the fit's error bounds are stated over: the projections, the activation, the
// norms and the residual add. The embedding and RoPE are fitted and reported too, but the embedding kernel runs
// faster on an A40 than on an A100 (no datasheet ceiling explains that), so they are left out of the bounds.
var CheckedOps = []string{
	costmodel.OpPreProj, costmodel.OpPostProj, costmodel.OpUpProj, costmodel.OpDownProj, costmodel.OpAct,
	costmodel.OpInputNorm, costmodel.OpPostAttnNorm, costmodel.OpAdd,
}

// OpError is the cost model's error on one operator of a Vidur profile.
type OpError struct {
	Op     string  `json:"op"`
	Points int     `json:"points"`
	MAPE   float64 `json:"mape_percent"` // median absolute percentage error over the profiled token counts
}

// ProfileError is the cost model's error with efficiencies p against Vidur's profile of the named model on the
// named device: per operator of VidurOps, and over every point of the CheckedOps together (checked).
func ProfileError(p costmodel.Params, modelName, device string) (ops []OpError, checked float64, err error) {
	m, err := ModelByName(modelName)
	if err != nil {
		return nil, 0, err
	}
	hw, err := HardwareByName(device)
	if err != nil {
		return nil, 0, err
	}
	ms, err := VidurMeasurements(m, hw)
	if err != nil {
		return nil, 0, err
	}
	pred, err := costmodel.Predict(p, ms)
	if err != nil {
		return nil, 0, err
	}
	ape := costmodel.APE(pred, ms)
	for _, op := range VidurOps {
		var e []float64
		for i, m := range ms {
			if m.Op == op {
				e = append(e, ape[i])
			}
		}
		ops = append(ops, OpError{Op: op, Points: len(e), MAPE: costmodel.Median(e)})
	}
	var c []float64
	for i, m := range ms {
		if slices.Contains(CheckedOps, m.Op) {
			c = append(c, ape[i])
		}
	}
	return ops, costmodel.Median(c), nil
}
