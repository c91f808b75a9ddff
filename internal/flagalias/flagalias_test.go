package flagalias

import (
	"flag"
	"slices"
	"strings"
	"testing"
)

// flags registers the same flags on a new set, with the deprecated names when withAliases.
func flags(withAliases bool) (*flag.FlagSet, *int, *string, *bool) {
	fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
	n := fs.Int("max-num-batched-tokens", 512, "`tokens` a step feeds at most")
	dev := fs.String("device", "", "the `device`")
	quiet := fs.Bool("quiet", false, "say less")
	if withAliases {
		Deprecate(fs, "max-tokens", "max-num-batched-tokens")
		Deprecate(fs, "gpu", "device")
		Deprecate(fs, "silent", "quiet")
	}
	return fs, n, dev, quiet
}

func TestAliasSetsTheFlagAndWarns(t *testing.T) {
	fs, n, dev, quiet := flags(true)
	var out strings.Builder
	fs.SetOutput(&out)
	if err := fs.Parse([]string{"--max-tokens", "2048", "--gpu=l4", "--silent"}); err != nil {
		t.Fatal(err)
	}
	if *n != 2048 || *dev != "l4" || !*quiet {
		t.Errorf("after the deprecated names: %d, %q, %v; want 2048, l4, true", *n, *dev, *quiet)
	}
	want := []string{
		"--gpu is deprecated; use --device",
		"--max-tokens is deprecated; use --max-num-batched-tokens",
		"--silent is deprecated; use --quiet",
	}
	if got := Warnings(fs); !slices.Equal(got, want) {
		t.Errorf("Warnings: %q, want %q", got, want)
	}
	if out.Len() != 0 {
		t.Errorf("parsing wrote %q", out.String())
	}

	fs, n, _, _ = flags(true)
	if err := fs.Parse([]string{"--max-num-batched-tokens", "64"}); err != nil || *n != 64 {
		t.Fatalf("the flag's own name: %d, %v", *n, err)
	}
	if got := Warnings(fs); got != nil {
		t.Errorf("Warnings without a deprecated name: %q, want none", got)
	}
}

// TestPrintDefaultsHidesAliases: the usage is exactly that of the same flags without the deprecated names, with
// the registered defaults even once the flags have been set.
func TestPrintDefaultsHidesAliases(t *testing.T) {
	ref, _, _, _ := flags(false)
	var want strings.Builder
	ref.SetOutput(&want)
	ref.PrintDefaults()

	fs, _, _, _ := flags(true)
	if err := fs.Parse([]string{"--max-tokens", "2048", "--device", "a100"}); err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	fs.SetOutput(&got)
	PrintDefaults(fs)
	if got.String() != want.String() {
		t.Errorf("PrintDefaults:\n%s\nwant\n%s", got.String(), want.String())
	}
	for _, old := range []string{"max-tokens", "gpu", "silent", "deprecated"} {
		if strings.Contains(got.String(), old) {
			t.Errorf("PrintDefaults lists %q:\n%s", old, got.String())
		}
	}
	if !strings.Contains(got.String(), "(default 512)") {
		t.Errorf("PrintDefaults lost the default 512:\n%s", got.String())
	}
}

func TestDeprecateUnknownFlag(t *testing.T) {
	defer func() {
		if r := recover(); r != "flagalias: --old names --new, which is not registered" {
			t.Errorf("panic %v", r)
		}
	}()
	Deprecate(flag.NewFlagSet("cmd", flag.ContinueOnError), "old", "new")
}
