// Package trace reads, generates, transforms and summarizes the request traces that morphlab's serving
// experiments replay. A trace is a list of requests (arrival time in seconds from the trace start, prompt and
// output token counts, Mooncake's prefix block ids, the source line) in arrival order, with where it came from
// and every transform applied to it, so that a result can say exactly what was replayed.
//
// # Formats
//
// Load tells the format from the first line (a CSV header, or a JSON object for Mooncake) unless
// LoadOptions.Format names it:
//
//   - azure: the Azure LLM inference trace 2023 (and 2024), CSV TIMESTAMP,ContextTokens,GeneratedTokens with
//     timestamps like "2023-11-16 18:15:46.6805900" (up to 9 fractional digits, an optional "Z" or "+hh:mm"
//     zone, UTC otherwise). They are read to the nanosecond.
//   - mooncake: Mooncake's JSON lines, {"timestamp": ms from the trace start, "input_length", "output_length",
//     "hash_ids": [ids of 512-token prefix blocks]}; other keys are ignored.
//   - vidur: Vidur's trace CSV, arrived_at (seconds), num_prefill_tokens, num_decode_tokens; other columns are
//     ignored.
//   - lengths: a length-only table, num_prefill_tokens,num_decode_tokens,... with no arrivals (Trace.NoArrivals);
//     WithArrivals gives it an arrival process, and Table samples lengths from it for Generate.
//   - burstgpt: BurstGPT's CSV, Timestamp (seconds), Model, Request tokens, Response tokens, Total tokens, Log
//     Type, and in newer files Session ID and Elapsed time, by name in any order. A row with 0 response tokens
//     is a failed request: skipped and counted in Trace.Failed, or kept with OutputTokens 0 by
//     LoadOptions.KeepFailed.
//
// Columns are found by name, so extra columns and other orders are fine; a byte-order mark, CRLF line ends,
// blank lines and a missing final newline (the Azure code trace has none) are accepted. Every record is checked:
// a bad number, a token count that is negative, not whole, 0 (prompt and output need at least one token) or over
// 2^30, a missing column or key, a wrong field count, or a time going backwards is an error of one line,
// "file:line: field: what was wrong" (a *ParseError). Loading never panics; the loaders are fuzzed.
//
// Arrivals are made relative to the first record: it arrives at 0, and its time on the file's clock is kept in
// Trace.Origin.
//
// Out-of-order timestamps are an error by default, naming the first record whose time is earlier than the
// record before it: a trace that is not in order is more often a corrupt or wrongly joined file than a
// deliberate one, and replaying it in file order would silently change its rate. With LoadOptions.SortArrivals
// (--sort-arrivals) the records are sorted stably by time instead (equal times keep their file order), the number of
// such records is kept in Trace.Reordered, and "sorted=N" is recorded in Transforms. Equal timestamps (Mooncake
// has many) are in order.
//
// Write writes a trace as Vidur CSV, Mooncake JSON lines, Azure CSV or a length table, in a form that Load reads
// back to the same requests.
//
// # Synthetic arrivals and lengths
//
// Generate draws a trace from a Process and a LengthSource with a seed; the arrivals and the lengths use two
// separate PCG streams derived from it, so the same seed gives the same trace byte for byte, and changing the
// lengths leaves the arrivals as they were. Each process starts at time 0 and its first arrival is one draw
// after it:
//
//   - Poisson{rate}: exponential inter-arrival times with mean 1/rate; coefficient of variation (CV) 1.
//   - Gamma{rate, burstiness}: gamma inter-arrival times as vLLM's benchmark_serving draws them, shape =
//     burstiness and scale = 1/(rate x burstiness): mean gap 1/rate, CV 1/sqrt(burstiness). Burstiness 1 is
//     Poisson, below 1 burstier, above 1 more regular.
//   - OnOff{on rate, off rate, on mean, off mean}: a two-state Markov-modulated Poisson process; each state lasts
//     an exponential time with its mean and emits Poisson arrivals at its rate (0 for silence). Mean rate
//     (on rate x on mean + off rate x off mean)/(on mean + off mean).
//   - Schedule{{duration, rate}, ...}: a piecewise-constant Poisson rate, segment after segment, ending with the
//     last (e.g. 60 s at 2/s, 20 s at 20/s, 60 s at 2/s for a 10x spike of 20 s).
//
// ParseProcess reads them as "poisson:RATE", "gamma:RATE:BURSTINESS", "onoff:ON:OFF:ONMEAN:OFFMEAN" and
// "schedule:60s@2,20s@20,60s@2". Lengths come from Independent{prompt, output} distributions (Fixed, Uniform
// over whole numbers, LogNormal with a median and a spread sigma, rounded and at least 1; ParseDist reads
// "fixed:N", "uniform:MIN:MAX", "lognormal:MEDIAN:SIGMA"), or from a Table of requests sampled with
// replacement, which keeps each prompt with its output.
//
// # Transforms
//
// Spread, Window, Busiest, TimeScale, Thin, Clip and LengthScale return a new trace and never change their input.
// Spread undoes a coarse clock (Mooncake's whole seconds) by spreading the requests that share a timestamp evenly
// over the interval it stands for, so that a replay does not turn them into one simultaneous burst. The
// busiest window of a length, by requests or by prompt plus output tokens, is how a "representative snippet" is
// picked. TimeScale multiplies every inter-arrival time by a factor: the MorphServe paper's "arrival rate
// downscaled 4.75x" is stretching the inter-arrival times by 4.75, TimeScale(t, 4.75), which divides the rate by
// 4.75 and keeps the shape of the bursts (Thin keeps each request with a probability instead, which lowers the
// rate too but changes the shape). Flags gives commands these transforms as command-line flags, applied in one
// documented order. A clip right after another is recorded as the one clip that cuts as both did, where one does
// (a replay's clip to its model's context after an experiment's clip to its limits).
//
// # Rebuilding a trace
//
// A trace records how it was made: its source (a file, or Generate's description of its process, lengths and
// seed), the sha256 of the bytes read (Trace.SHA256: the file, or a generator's length table), its format and each
// transform in order (with the load options that change what is read: "sorted=N" for SortArrivals,
// "kept-failed=N" for KeepFailed). Recipe.Rebuild makes it again from that record — the file read again and
// checked against its sha256, or the generator drawn again (Regenerate), then every transform reapplied
// (Reapply) — so that a result can be re-run from its own record.
//
// # Statistics
//
// Stats gives the count, duration (first arrival to last), mean rate, peak rates over 1-s and 10-s windows,
// burstiness (CV of inter-arrival times, and the index of dispersion of counts in 1-s and 10-s bins), prompt and
// output length percentiles (nearest rank) and token demand per second.
package trace
