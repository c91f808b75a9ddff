package datafetch

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/morphlab/morphlab/internal/datadir"
)

// fixture is a file the test server serves: its bytes as the manifest pins them, and what the server sends.
type fixture struct {
	file File
	body []byte // what the server sends (differs from the pinned bytes for the corrupt one)
}

func pinned(path string, data []byte) File {
	sum := sha256.Sum256(data)
	return File{Path: path, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// server serves fixtures by path with http.ServeContent (which answers Range requests). The file named
// interrupted is cut off halfway through the first time it is asked for from the start. It records the Range
// header of every request.
type server struct {
	*httptest.Server
	mu       sync.Mutex
	ranges   map[string][]string
	cutOnce  map[string]bool
	ignoreRR bool // answer every request with the whole file (200), as a server without range support does
}

func newServer(t *testing.T, fx map[string][]byte, interrupted string) *server {
	s := &server{ranges: map[string][]string{}, cutOnce: map[string]bool{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := strings.TrimPrefix(r.URL.Path, "/")
		body, ok := fx[path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		s.mu.Lock()
		s.ranges[path] = append(s.ranges[path], r.Header.Get("Range"))
		cut := path == interrupted && !s.cutOnce[path] && r.Header.Get("Range") == ""
		if cut {
			s.cutOnce[path] = true
		}
		ignore := s.ignoreRR
		s.mu.Unlock()
		if cut {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.WriteHeader(http.StatusOK)
			w.Write(body[:len(body)/2])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the connection drops mid-body
		}
		if ignore {
			r.Header.Del("Range")
		}
		http.ServeContent(w, r, path, time.Time{}, bytes.NewReader(body))
	}))
	t.Cleanup(s.Close)
	return s
}

func gz(t *testing.T, data []byte) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(data)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestFetch(t *testing.T) {
	good := randomBytes(1, 100_000)
	cut := randomBytes(2, 300_000)
	text := []byte(strings.Repeat("wiki text line\n", 5000))
	corruptWant, corruptSent := randomBytes(3, 5000), randomBytes(4, 5000)

	files := []File{
		pinned("models/good.bin", good),
		pinned("traces/cut.jsonl", cut),
		pinned("eval/text.raw", text),
		pinned("eval/corrupt.txt", corruptWant),
	}
	files[2].Gzip = true
	srv := newServer(t, map[string][]byte{
		"models/good.bin":  good,
		"traces/cut.jsonl": cut,
		"eval/text.raw.gz": gz(t, text),
		"eval/corrupt.txt": corruptSent,
	}, "traces/cut.jsonl")
	dir := t.TempDir()
	opt := Options{BaseURL: srv.URL}

	res, err := Fetch(context.Background(), dir, files, opt)
	if err == nil || !strings.HasPrefix(err.Error(), "2 of 4 files failed; first: traces/cut.jsonl: GET "+srv.URL+"/traces/cut.jsonl: interrupted after 150000 bytes") {
		t.Errorf("first run: error %v, want the interrupted download named first of two failures", err)
	}
	want := []Status{Fetched, Failed, Fetched, Failed}
	for i, r := range res {
		if r.Status != want[i] {
			t.Errorf("first run, %s: %s (%v), want %s", r.File.Path, r.Status, r.Err, want[i])
		}
	}
	if r := res[3]; r.Err == nil || !strings.Contains(r.Err.Error(), "sha256 "+pinned("", corruptSent).SHA256) ||
		!strings.Contains(r.Err.Error(), "want "+files[3].SHA256+"; refused") {
		t.Errorf("corrupt file: %v, want a refusal naming the pinned sha256", r.Err)
	}
	assertFile(t, filepath.Join(dir, "models/good.bin"), good)
	assertFile(t, filepath.Join(dir, "eval/text.raw"), text)
	assertFile(t, filepath.Join(dir, "traces/cut.jsonl.part"), cut[:len(cut)/2])
	for _, gone := range []string{"eval/corrupt.txt", "eval/corrupt.txt.part", "traces/cut.jsonl", "eval/text.raw.part", "models/good.bin.part"} {
		if _, err := os.Stat(filepath.Join(dir, gone)); err == nil {
			t.Errorf("%s exists after the first run", gone)
		}
	}

	// Second run: the cut file resumes from its .part with a Range request, the others are verified in place,
	// the corrupt one is refused again.
	res, err = Fetch(context.Background(), dir, files, opt)
	if err == nil || !strings.HasPrefix(err.Error(), "1 of 4 files failed; first: eval/corrupt.txt: ") {
		t.Errorf("second run: error %v, want only the corrupt file", err)
	}
	want = []Status{Present, Resumed, Present, Failed}
	for i, r := range res {
		if r.Status != want[i] {
			t.Errorf("second run, %s: %s (%v), want %s", r.File.Path, r.Status, r.Err, want[i])
		}
	}
	assertFile(t, filepath.Join(dir, "traces/cut.jsonl"), cut)
	if got := srv.ranges["traces/cut.jsonl"]; len(got) != 2 || got[0] != "" || got[1] != "bytes=150000-" {
		t.Errorf("requests for the cut file had ranges %q, want none then bytes=150000-", got)
	}
	if got := srv.ranges["models/good.bin"]; len(got) != 1 {
		t.Errorf("the good file was requested %d times, want once (then verified in place)", len(got))
	}

	// A file in place that differs is not overwritten.
	if err := os.WriteFile(filepath.Join(dir, "models/good.bin"), []byte("edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Fetch(context.Background(), dir, files[:1], opt)
	if err == nil || !strings.Contains(err.Error(), "good.bin is there but 6 bytes, want 100000; remove it to fetch it again") {
		t.Errorf("edited file: %v", err)
	}
}

// TestFetchRestartsWithoutRange: a server that ignores Range sends the whole file again, and the .part is
// rewritten from the start rather than appended to.
func TestFetchRestartsWithoutRange(t *testing.T) {
	data := randomBytes(5, 50_000)
	files := []File{pinned("a/b.bin", data)}
	srv := newServer(t, map[string][]byte{"a/b.bin": data}, "a/b.bin")
	dir := t.TempDir()
	if _, err := Fetch(context.Background(), dir, files, Options{BaseURL: srv.URL}); err == nil {
		t.Fatal("the cut download succeeded")
	}
	srv.ignoreRR = true
	res, err := Fetch(context.Background(), dir, files, Options{BaseURL: srv.URL})
	if err != nil || res[0].Status != Fetched {
		t.Fatalf("second run: %v, %+v", err, res)
	}
	assertFile(t, filepath.Join(dir, "a/b.bin"), data)
}

func TestFetchErrors(t *testing.T) {
	data := randomBytes(6, 1000)
	srv := newServer(t, map[string][]byte{"x/here.bin": data}, "")
	dir := t.TempDir()

	_, err := Fetch(context.Background(), dir, []File{pinned("x/missing.bin", data)}, Options{BaseURL: srv.URL})
	if err == nil || err.Error() != "1 of 1 files failed; first: x/missing.bin: GET "+srv.URL+"/x/missing.bin: 404 Not Found" {
		t.Errorf("missing file: %v", err)
	}
	// Too long: the bytes past the pinned size are refused.
	short := pinned("x/here.bin", data[:500])
	_, err = Fetch(context.Background(), dir, []File{short}, Options{BaseURL: srv.URL})
	if err == nil || !strings.Contains(err.Error(), "501 bytes, want 500; refused") {
		t.Errorf("longer file: %v", err)
	}

	// No network: every file fails to connect, and the error is one line naming the host.
	srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	files := []File{pinned("x/a.bin", data), pinned("x/b.bin", data), pinned("y/c.bin", data)}
	res, err := Fetch(context.Background(), dir, files, Options{BaseURL: srv.URL})
	if err == nil || err.Error() != "could not reach "+host+": 3 of 3 files not in place (no network?)" {
		t.Errorf("unreachable: %v", err)
	}
	for _, r := range res {
		if r.Status != Failed || !strings.Contains(r.Err.Error(), "cannot reach "+host) {
			t.Errorf("%s: %s %v", r.File.Path, r.Status, r.Err)
		}
	}
}

func assertFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Error(err)
		return
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: %d bytes, not the %d expected", path, len(got), len(want))
	}
}

func TestSelect(t *testing.T) {
	got, err := Select(Manifest, []string{"traces/azure2023/", "models/tok512.bin"})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range got {
		paths = append(paths, f.Path)
	}
	want := "traces/azure2023/AzureLLMInferenceTrace_conv.csv traces/azure2023/AzureLLMInferenceTrace_code.csv models/tok512.bin"
	if strings.Join(paths, " ") != want {
		t.Errorf("Select = %v, want %s", paths, want)
	}
	if _, err := Select(Manifest, []string{"trace"}); err == nil || !strings.Contains(err.Error(), `"trace" is no data file`) {
		t.Errorf("Select(trace) = %v, want an error naming it", err)
	}
}

// TestManifest: every entry is complete and distinct, and, where the shared data directory is at hand, its pinned
// size and sha256 are those of the file there.
func TestManifest(t *testing.T) {
	hexSum := regexp.MustCompile(`^[0-9a-f]{64}$`)
	seen := map[string]bool{}
	var total int64
	for _, f := range Manifest {
		if seen[f.Path] || !hexSum.MatchString(f.SHA256) || f.Size <= 0 || !strings.HasPrefix(f.URL, "https://") || f.What == "" {
			t.Errorf("manifest entry %+v: duplicate or incomplete", f)
		}
		seen[f.Path] = true
		total += f.Size
	}
	if total < 13_500_000 || total > 14_500_000 {
		t.Errorf("manifest totals %d bytes; the README says about 14 MB", total)
	}
	dir, err := datadir.Dir()
	if err != nil {
		t.Skipf("skipping the checksums: %v", err)
	}
	for _, f := range Manifest {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if _, err := os.Stat(p); err != nil {
			t.Logf("%s not in %s", f.Path, dir)
			continue
		}
		if err := verify(p, f); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// failingTransport fails every request as a network without a route does, and counts them.
type failingTransport struct{ requests int }

func (f *failingTransport) RoundTrip(*http.Request) (*http.Response, error) {
	f.requests++
	return nil, errors.New("dial tcp: connect: network is unreachable")
}

// TestFetchSkipsUnreachableHost: after the first failure to connect, the other files of that host are not tried,
// and a file already in place is still verified.
func TestFetchSkipsUnreachableHost(t *testing.T) {
	data := randomBytes(7, 100)
	dir := t.TempDir()
	here := pinned("m/here.bin", data)
	if err := os.MkdirAll(filepath.Join(dir, "m"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "m/here.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	files := []File{pinned("m/a.bin", data), here, pinned("m/b.bin", data), pinned("m/c.bin", data)}
	for i := range files {
		files[i].URL = "https://example.org/" + files[i].Path
	}
	tr := &failingTransport{}
	res, err := Fetch(context.Background(), dir, files, Options{Client: &http.Client{Transport: tr}})
	if err == nil || err.Error() != "could not reach example.org: 3 of 4 files not in place (no network?)" {
		t.Errorf("error %v", err)
	}
	if tr.requests != 1 {
		t.Errorf("%d requests, want 1 (the host's other files not tried)", tr.requests)
	}
	if res[1].Status != Present || res[2].Status != Failed || !strings.Contains(res[2].Err.Error(), "m/b.bin: cannot reach example.org: not tried again") {
		t.Errorf("results %+v", res)
	}
}
