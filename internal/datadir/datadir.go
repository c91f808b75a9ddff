// Package datadir finds morphlab's data files (model weights, traces, evaluation text): $MORPHLAB_DATA if set,
// else ./data at the module root (ignored by git; `make data` fills it), else ../shared/data beside the checkout.
package datadir

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the first data directory that exists, in lookup order, or an error naming the places it looked.
func Dir() (string, error) {
	var tried []string
	if env := os.Getenv("MORPHLAB_DATA"); env != "" {
		if isDir(env) {
			return env, nil
		}
		return "", fmt.Errorf("MORPHLAB_DATA=%s is not a directory", env)
	}
	if root, ok := moduleRoot(); ok {
		for _, d := range []string{filepath.Join(root, "data"), filepath.Join(root, "..", "shared", "data")} {
			if isDir(d) {
				return d, nil
			}
			tried = append(tried, d)
		}
	}
	return "", fmt.Errorf("no data directory: set MORPHLAB_DATA or create one of %v", tried)
}

// Path returns the path of rel (slash-separated, e.g. "models/stories260K.bin") in the data directory, or an error
// saying that it is missing.
func Path(rel string) (string, error) {
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("data file %s not found in %s", rel, dir)
	}
	return p, nil
}

// ForTest returns the path of rel, or skips the test with a one-line reason when it is absent.
func ForTest(tb testing.TB, rel string) string {
	tb.Helper()
	p, err := Path(rel)
	if err != nil {
		tb.Skipf("skipping: %v", err)
	}
	return p
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// moduleRoot walks up from the working directory to the folder holding go.mod.
func moduleRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}
