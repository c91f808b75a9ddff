package catalog

import (
	"fmt"
	"slices"
	"strings"
)

// Price is a device's on-demand price per GPU-hour, and where and when it was read.
type Price struct {
	USDPerHour float64
	Source     string
	Date       string // when the source read it
}

// Prices are the catalog's devices' on-demand prices per GPU-hour, each from a public price list, so that a fleet's
// cost is stated in dollars. They are list prices (no commitment, reservation or spot discount) and differ from
// provider to provider by 2x and more: they rank strategies, they are no quote.
var Prices = map[string]Price{
	// AWS EC2 on-demand, us-east-1, Linux: g6.xlarge, one L4 (4 vCPUs, 16 GiB).
	"l4": {0.8048, "AWS EC2 on-demand price list, us-east-1, g6.xlarge (1x L4), as quoted on", "2026-09-26"},
	// AWS EC2 on-demand, us-east-1: p4de.24xlarge, eight A100 80GB SXM, $27.44705 an hour.
	"a100": {3.4309, "AWS EC2 on-demand price list, us-east-1, p4de.24xlarge (8x A100 80GB) / 8, read on", "2026-11-09"},
	// AWS EC2 on-demand, us-east-1: p5.48xlarge, eight H100 80GB SXM, $55.04 an hour.
	"h100": {6.88, "AWS EC2 on-demand price list, us-east-1, p5.48xlarge (8x H100 80GB) / 8, read on", "2026-11-09"},
	// RunPod on-demand pods (runpod.io/pricing): one H200 141GB.
	"h200": {4.59, "RunPod on-demand pod price list (runpod.io/pricing), 1x H200, read on", "2026-10-07"},
}

// PriceOf returns a device's price; the error lists the devices that have one.
func PriceOf(device string) (Price, error) {
	if p, ok := Prices[device]; ok {
		return p, nil
	}
	names := make([]string, 0, len(Prices))
	for n := range Prices {
		names = append(names, n)
	}
	slices.Sort(names)
	return Price{}, fmt.Errorf("no price for device %q (priced: %s)", device, strings.Join(names, ", "))
}
