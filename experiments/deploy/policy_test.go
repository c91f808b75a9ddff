package deploy

import (
	"testing"

	"github.com/morphlab/morphlab/engine/morph"
)

// neverSwaps is a morphing policy from outside engine/morph whose Control is left zero.
type neverSwaps struct{ morph.Control }

func (*neverSwaps) Rule() morph.Rule      { return alwaysPressure{} }
func (*neverSwaps) Params() []morph.Param { return nil }

type alwaysPressure struct{}

func (alwaysPressure) Judge(morph.Input) morph.Verdict {
	return morph.Verdict{Pressure: []string{"always"}}
}

// TestPolicyThatCannotSwap: a deployment whose policy could never swap a layer fails to build with one line naming
// the parameter: a zero Control, or a cap that rounds to none of the model's layers (stories260K has 5).
func TestPolicyThatCannotSwap(t *testing.T) {
	for _, c := range []struct {
		policy morph.Policy
		want   string
	}{
		{&neverSwaps{}, "deploy: policy of type *deploy.neverSwaps: persistence=0: pressure would never start a swap, want >= 1"},
		{mustPolicy(t, "morph:default:cap=0.05"), `deploy: policy "morph:default:cap=0.05": cap=0.05 of 5 layers quantizes none of them, want cap >= 0.1`},
	} {
		_, err := Deployment{Model: "stories260K", KV: KV{Blocks: 40}, Policy: c.policy}.Build()
		if err == nil || err.Error() != c.want {
			t.Errorf("%v: %v, want %s", c.policy, err, c.want)
		}
	}
}
