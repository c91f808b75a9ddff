package server

import (
	"strconv"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/quant"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the server's Prometheus metrics, under vLLM's (V1) names with the morphlab: prefix, each labelled
// with model_name as vLLM's are. Gauges, the preemption counter and the prefix cache's counters follow the
// engine's OnStep signals; the per-request histograms and token counters are observed from each request's result
// when it ends.
type metrics struct {
	running, waiting, kvUsage, quantized, blocks prometheus.Gauge
	preemptions, promptTokens, genTokens         prometheus.Counter
	prefixQueries, prefixHits                    prometheus.Counter
	success                                      *prometheus.CounterVec
	ttft, itl, tpot, e2e, queue                  prometheus.Histogram
}

// Latency buckets: vLLM's, with finer ones below 10 ms, since a small model on the CPU decodes a token in a few
// milliseconds.
var (
	ttftBuckets = []float64{0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}
	itlBuckets  = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	e2eBuckets  = []float64{0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}
)

// newMetrics registers the metrics of a server of model on reg, and cache_config_info: vLLM's gauge of the KV
// cache's configuration as labels (block_size in tokens, num_gpu_blocks the pool at the start), which the Gateway
// API Inference Extension's endpoint picker reads beside num_requests_waiting, num_requests_running and
// kv_cache_usage_perc.
func newMetrics(reg prometheus.Registerer, model string, blockSize, blocks int) *metrics {
	labels := prometheus.Labels{"model_name": model}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "morphlab:" + name, Help: help, ConstLabels: labels})
		reg.MustRegister(g)
		return g
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: "morphlab:" + name, Help: help, ConstLabels: labels})
		reg.MustRegister(c)
		return c
	}
	hist := func(name, help string, buckets []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "morphlab:" + name, Help: help, ConstLabels: labels, Buckets: buckets})
		reg.MustRegister(h)
		return h
	}
	m := &metrics{
		running:      gauge("num_requests_running", "Number of requests in model execution batches."),
		waiting:      gauge("num_requests_waiting", "Number of requests waiting to be processed (new and preempted)."),
		kvUsage:      gauge("kv_cache_usage_perc", "KV-cache usage: the fraction of attached KV blocks held by requests (1 means 100 percent)."),
		quantized:    gauge("num_quantized_layers", "Decoder layers running in an integer format (int8, int4, q8_0, q4_0)."),
		blocks:       gauge("kv_cache_blocks", "KV blocks attached to the pool (base region plus regions made of freed weight memory)."),
		preemptions:  counter("num_preemptions_total", "Cumulative number of preemptions (a request loses its KV blocks and is recomputed)."),
		promptTokens: counter("prompt_tokens_total", "Number of prefill tokens processed."),
		// vLLM counts both at every scheduling of a request, a preempted one's included.
		prefixQueries: counter("prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens."),
		prefixHits:    counter("prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens."),
		genTokens:     counter("generation_tokens_total", "Number of generation tokens processed."),
		ttft:          hist("time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets),
		itl:           hist("inter_token_latency_seconds", "Histogram of the time between consecutive output tokens in seconds.", itlBuckets),
		tpot:          hist("request_time_per_output_token_seconds", "Histogram of each request's time per output token after the first, (e2e - ttft) / (output tokens - 1), in seconds.", itlBuckets),
		e2e:           hist("e2e_request_latency_seconds", "Histogram of end-to-end request latency in seconds.", e2eBuckets),
		queue:         hist("request_queue_time_seconds", "Histogram of the time from arrival to the first batch a request ran in, in seconds.", e2eBuckets),
	}
	m.success = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "morphlab:request_success_total",
		Help: "Count of finished requests by finish reason: stop, length, or abort (cancelled).", ConstLabels: labels}, []string{"finished_reason"})
	reg.MustRegister(m.success)
	for _, r := range []string{"stop", "length", "abort"} {
		m.success.WithLabelValues(r) // present at 0 from the start, so that rate() sees the first increment
	}
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "morphlab:cache_config_info", Help: "Information of the KV cache's configuration (1).",
		ConstLabels: labels}, []string{"block_size", "num_gpu_blocks"})
	reg.MustRegister(info)
	info.WithLabelValues(strconv.Itoa(blockSize), strconv.Itoa(blocks)).Set(1)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// step updates the gauges from the engine's signals after an iteration or at an idle tick.
func (m *metrics) step(info engine.StepInfo) {
	m.running.Set(float64(info.Running))
	m.waiting.Set(float64(info.Waiting))
	if info.Total > 0 {
		m.kvUsage.Set(float64(info.Used) / float64(info.Total))
	}
	m.blocks.Set(float64(info.Total))
	m.preemptions.Add(float64(info.Preempted))
	m.prefixQueries.Add(float64(info.PrefixQueries))
	m.prefixHits.Add(float64(info.PrefixHits))
	if info.Formats != nil { // idle ticks carry no formats: keep the last step's
		n := 0
		for _, f := range info.Formats {
			if isInteger(f) {
				n++
			}
		}
		m.quantized.Set(float64(n))
	}
}

func isInteger(f quant.Format) bool {
	return f == quant.Int8 || f == quant.Int4 || f == quant.Q8_0 || f == quant.Q4_0
}

// request observes a request when it ends, with its prompt's length: reason is the finish reason the client was told ("stop",
// "length", or "abort" for a request cancelled by its client or the shutdown deadline).
func (m *metrics) request(res engine.Result, prompt int, reason string) {
	tl := res.Timeline
	m.success.WithLabelValues(reason).Inc()
	m.e2e.Observe(tl.E2E().Seconds())
	if tl.Scheduled == 0 && len(tl.Tokens) == 0 {
		return // it never ran
	}
	m.promptTokens.Add(float64(prompt))
	m.genTokens.Add(float64(len(res.Output)))
	m.queue.Observe((tl.Scheduled - tl.Arrival).Seconds())
	if len(tl.Tokens) > 0 {
		m.ttft.Observe(tl.TTFT().Seconds())
	}
	for i := 1; i < len(tl.Tokens); i++ {
		m.itl.Observe((tl.Tokens[i] - tl.Tokens[i-1]).Seconds())
	}
	if len(tl.Tokens) > 1 {
		m.tpot.Observe(tl.TPOT().Seconds())
	}
}
