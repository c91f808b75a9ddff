package trace

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Recipe is how a trace was made, as results record it: its source, the sha256 of the bytes read, its format
// and its transforms in order. Rebuild makes the same trace again from it.
type Recipe struct {
	Source     string
	SHA256     string
	Format     string
	Transforms []string
}

// Recipe returns how t was made.
func (t *Trace) Recipe() Recipe {
	return Recipe{Source: t.Source, SHA256: t.SHA256, Format: t.Format, Transforms: slices.Clone(t.Transforms)}
}

// Rebuild makes the trace again: a generated one drawn again from its source (Regenerate), any other read again
// from its source file with the load options its first records show (sorted=N: SortArrivals; kept-failed=N:
// KeepFailed); the bytes read (the file, or a generator's length table) must have the recorded sha256. Then
// every transform after those is applied again in order (Reapply), and the trace's records must come out as
// recorded.
func (r Recipe) Rebuild() (*Trace, error) {
	var t *Trace
	var err error
	read := r.Source
	if r.Format == Synthetic {
		if t, err = Regenerate(r.Source); err != nil {
			return nil, err
		}
		read = "the length table of " + r.Source
	} else {
		opt := LoadOptions{Format: r.Format}
		for _, rec := range r.Transforms {
			switch {
			case strings.HasPrefix(rec, "sorted="):
				opt.SortArrivals = true
			case strings.HasPrefix(rec, "kept-failed="):
				opt.KeepFailed = true
			}
		}
		if t, err = Load(r.Source, opt); err != nil {
			return nil, fmt.Errorf("trace: %w", err)
		}
	}
	if t.SHA256 != r.SHA256 {
		return nil, fmt.Errorf("trace: %s has changed since the run: sha256 %s, recorded %s", read, t.SHA256, r.SHA256)
	}
	if len(t.Transforms) > len(r.Transforms) || !slices.Equal(t.Transforms, r.Transforms[:len(t.Transforms)]) {
		return nil, fmt.Errorf("trace: %s reads with the records %q, recorded %q", r.Source, t.Transforms, r.Transforms)
	}
	if t, err = Reapply(t, r.Transforms[len(t.Transforms):]); err != nil {
		return nil, err
	}
	if !slices.Equal(t.Transforms, r.Transforms) {
		return nil, fmt.Errorf("trace: %s rebuilt with the transforms %q, recorded %q", r.Source, t.Transforms, r.Transforms)
	}
	return t, nil
}

// Reapply applies again the transforms whose records are given, in order: window, busiest (with the window it
// chose, which must come out the same), spread, time-scale, thin, length-scale, clip and arrivals, each as the
// transform records itself. An unknown or malformed record is an error naming it.
func Reapply(t *Trace, records []string) (*Trace, error) {
	for i := 0; i < len(records); i++ {
		rec := records[i]
		name, arg, _ := strings.Cut(rec, "=")
		bad := fmt.Errorf("trace: transform %q: not a record this build reads", rec)
		var err error
		switch name {
		case "spread":
			res, perr := secondsRecord(arg)
			if perr != nil {
				return nil, bad
			}
			t, err = Spread(t, res)
		case "window":
			off, dur, ok := strings.Cut(arg, "s+")
			o, perr1 := secondsRecord(off + "s")
			d, perr2 := secondsRecord(dur)
			if !ok || perr1 != nil || perr2 != nil {
				return nil, bad
			}
			t, err = Window(t, o, d)
		case "busiest":
			dur, by, ok := strings.Cut(arg, "/")
			d, perr := secondsRecord(dur)
			if !ok || perr != nil {
				return nil, bad
			}
			if t, err = Busiest(t, d, by); err == nil {
				// Busiest records the window it chose after itself.
				chose := t.Transforms[len(t.Transforms)-1]
				if i+1 == len(records) || records[i+1] != chose {
					return nil, fmt.Errorf("trace: reapplying %s: it chose %s, not the window recorded after it", rec, chose)
				}
				i++
			}
		case "time-scale":
			f, perr := strconv.ParseFloat(arg, 64)
			if perr != nil {
				return nil, bad
			}
			t, err = TimeScale(t, f)
		case "thin":
			p, seed, ok := strings.Cut(arg, "/seed=")
			x, perr1 := strconv.ParseFloat(p, 64)
			s, perr2 := strconv.ParseUint(seed, 10, 64)
			if !ok || perr1 != nil || perr2 != nil {
				return nil, bad
			}
			t, err = Thin(t, x, s)
		case "length-scale":
			p, o, perr := parseFactors(arg)
			if perr != nil {
				return nil, bad
			}
			t, err = LengthScale(t, p, o)
		case "clip":
			l, ok := parseClip(rec)
			if !ok {
				return nil, bad
			}
			t, err = Clip(t, l)
		case "arrivals":
			proc, seed, ok := cutLast(arg, "/seed=")
			p, perr1 := ParseProcess(proc)
			s, perr2 := strconv.ParseUint(seed, 10, 64)
			if !ok || perr1 != nil || perr2 != nil {
				return nil, bad
			}
			t, err = WithArrivals(t, p, s)
		default:
			return nil, bad
		}
		if err != nil {
			return nil, fmt.Errorf("trace: reapplying %s: %w", rec, err)
		}
	}
	return t, nil
}

// cutLast is strings.Cut at the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// secondsRecord reads a time as transforms record it: "72s", "1073.5s".
func secondsRecord(s string) (float64, error) {
	v, ok := strings.CutSuffix(s, "s")
	f, err := strconv.ParseFloat(v, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("time %q, want seconds such as 72s", s)
	}
	return f, nil
}

// Regenerate draws again the trace that Generate described as source, "PROCESS LENGTHS seed=N[ n=N][
// duration=Ds]", LENGTHS being "prompt=DIST output=DIST" or "lengths=FILE" (the table read again).
func Regenerate(source string) (*Trace, error) {
	bad := func(why string) error { return fmt.Errorf("trace: generator %q: %s", source, why) }
	proc, rest, ok1 := strings.Cut(source, " ")
	lengths, tail, ok2 := cutLast(rest, " seed=")
	if !ok1 || !ok2 {
		return nil, bad("want PROCESS LENGTHS seed=N as Generate writes it")
	}
	var spec Spec
	var err error
	if spec.Process, err = ParseProcess(proc); err != nil {
		return nil, bad(err.Error())
	}
	if file, ok := strings.CutPrefix(lengths, "lengths="); ok {
		tab, err := Load(file, LoadOptions{})
		if err != nil {
			return nil, fmt.Errorf("trace: %w", err)
		}
		spec.Lengths = Table{From: tab}
	} else {
		p, o, ok := strings.Cut(lengths, " ")
		p, okP := strings.CutPrefix(p, "prompt=")
		o, okO := strings.CutPrefix(o, "output=")
		if !ok || !okP || !okO {
			return nil, bad("lengths " + strconv.Quote(lengths) + ", want prompt=DIST output=DIST or lengths=FILE")
		}
		var in Independent
		if in.Prompt, err = ParseDist(p); err != nil {
			return nil, bad(err.Error())
		}
		if in.Output, err = ParseDist(o); err != nil {
			return nil, bad(err.Error())
		}
		spec.Lengths = in
	}
	var seed uint64
	for _, f := range strings.Fields("seed=" + tail) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "seed":
			seed, err = strconv.ParseUint(v, 10, 64)
		case "n":
			spec.N, err = strconv.Atoi(v)
		case "duration":
			spec.Duration, err = secondsRecord(v)
		default:
			err = fmt.Errorf("unknown field %q", f)
		}
		if err != nil {
			return nil, bad(err.Error())
		}
	}
	t, err := Generate(spec, seed)
	if err != nil {
		return nil, bad(err.Error())
	}
	if t.Source != source {
		return nil, bad("reads back as " + strconv.Quote(t.Source))
	}
	return t, nil
}
