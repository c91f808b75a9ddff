package probe

import (
	"bufio"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/cpu"
)

// cpuModel returns the CPU model name from /proc/cpuinfo, or GOARCH where the file or the field is missing.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(key) == "model name" {
			return strings.TrimSpace(value)
		}
	}
	return runtime.GOARCH
}

// features returns the names of the vector features that kernels dispatch on and that this CPU has.
func features() []string {
	list := []struct {
		name string
		has  bool
	}{
		{"avx", cpu.X86.HasAVX},
		{"avx2", cpu.X86.HasAVX2},
		{"fma", cpu.X86.HasFMA},
		{"f16c", cpu.X86.HasF16C},
		{"avxvnni", cpu.X86.HasAVXVNNI},
		{"avx512f", cpu.X86.HasAVX512F},
		{"avx512bw", cpu.X86.HasAVX512BW},
		{"avx512dq", cpu.X86.HasAVX512DQ},
		{"avx512vl", cpu.X86.HasAVX512VL},
		{"avx512vnni", cpu.X86.HasAVX512VNNI},
		{"avx512bf16", cpu.X86.HasAVX512BF16},
		{"avx512vbmi", cpu.X86.HasAVX512VBMI},
		{"amxint8", cpu.X86.HasAMXInt8},
		{"asimd", cpu.ARM64.HasASIMD},
		{"asimddp", cpu.ARM64.HasASIMDDP},
		{"i8mm", cpu.ARM64.HasI8MM},
		{"sve", cpu.ARM64.HasSVE},
	}
	names := []string{}
	for _, f := range list {
		if f.has {
			names = append(names, f.name)
		}
	}
	return names
}

// CPUModel is the CPU's model name as Ceilings.CPU records it: from /proc/cpuinfo, or GOARCH.
func CPUModel() string { return cpuModel() }
