package morph

import (
	"slices"
	"strings"
	"testing"
)

func init() {
	// Policies whose ParseFunc breaks Parse's contract, for TestRegistry.
	Register("misnamed", func([]string) (Policy, error) { return FP16{}, nil })
	Register("nothing", func([]string) (Policy, error) { return nil, nil })
}

// TestRegistry: the built-ins are registered names like any other; Register refuses a second registration, a name
// with a ':' and a nil ParseFunc; Parse refuses what a ParseFunc makes wrong: no policy, or a policy named other
// than as parsed.
func TestRegistry(t *testing.T) {
	names := Names()
	if !slices.IsSorted(names) {
		t.Errorf("Names() %v, want them sorted", names)
	}
	for _, want := range []string{"fp16", "morph", "selective", "static", "misnamed", "nothing"} {
		if !slices.Contains(names, want) {
			t.Errorf("Names() %v, want %s among them", names, want)
		}
	}
	_, err := Parse("fp32:x")
	if want := `policy "fp32:x": unknown name "fp32", want one of ` + strings.Join(names, ", "); err == nil || err.Error() != want {
		t.Errorf("unknown name: %v, want %s", err, want)
	}
	for _, c := range []struct {
		name  string
		parse ParseFunc
		want  string
	}{
		{"fp16", parseFP16, `morph: Register called twice for policy "fp16"`},
		{"morph", parseMorph, `morph: Register called twice for policy "morph"`},
		{"a:b", parseFP16, `morph: Register of policy "a:b": a name is not empty and holds no ':'`},
		{"", parseFP16, `morph: Register of policy "": a name is not empty and holds no ':'`},
		{"fresh", nil, `morph: Register of policy "fresh" with a nil ParseFunc`},
	} {
		func() {
			defer func() {
				if r := recover(); r != c.want {
					t.Errorf("Register(%q): panic %v, want %q", c.name, r, c.want)
				}
			}()
			Register(c.name, c.parse)
		}()
	}
	if slices.Contains(Names(), "fresh") {
		t.Error("a refused registration was registered")
	}
	for name, want := range map[string]string{
		"misnamed:x": `policy "misnamed:x": its String is "fp16": a policy's name is the one it was parsed from`,
		"nothing":    `policy "nothing": the parse of nothing made no policy`,
	} {
		if _, err := Parse(name); err == nil || err.Error() != want {
			t.Errorf("Parse(%q): %v, want %s", name, err, want)
		}
	}
}
