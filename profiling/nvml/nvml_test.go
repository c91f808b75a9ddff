package nvml

import (
	"strings"
	"testing"
	"time"
)

// TestStartOrReason samples for a moment where NVML works and otherwise checks that the reason is one line
// starting with "nvml:".
func TestStartOrReason(t *testing.T) {
	s, err := Start(10 * time.Millisecond)
	if err != nil {
		if msg := err.Error(); !strings.HasPrefix(msg, "nvml: ") || strings.Contains(msg, "\n") {
			t.Errorf("reason %q, want one line starting with \"nvml: \"", msg)
		}
		if p := Probe(); p != err.Error() {
			t.Errorf("Probe says %q, Start %q", p, err)
		}
		t.Log(err)
		return
	}
	time.Sleep(50 * time.Millisecond)
	samples, err := s.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) < len(s.Devices) {
		t.Fatalf("%d samples from %d devices", len(samples), len(s.Devices))
	}
	for _, x := range samples {
		if x.MemTotal == 0 || x.MemUsed > x.MemTotal || x.GPUUtil > 100 || x.MemUtil > 100 {
			t.Errorf("implausible sample %+v", x)
		}
	}
	t.Log(Probe())
	t.Log(Summary(s.Devices, samples))
}

func TestSummary(t *testing.T) {
	devs := []Device{{0, "A"}, {1, "B"}}
	got := Summary(devs, []Sample{
		{Device: 0, MemUsed: 1 << 20, MemTotal: 4 << 20, GPUUtil: 10},
		{Device: 0, MemUsed: 3 << 20, MemTotal: 4 << 20, GPUUtil: 30},
	})
	want := "nvml: gpu 0 A: memory peak 3.0 MiB, mean 2.0 MiB of 4.0 MiB; utilization mean 20% (2 samples)\n" +
		"nvml: gpu 1 B: no samples"
	if got != want {
		t.Errorf("Summary:\n%s\nwant\n%s", got, want)
	}
}
