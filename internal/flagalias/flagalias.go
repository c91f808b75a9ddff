// Package flagalias keeps a renamed command-line flag working under its old name for a while: the old name sets
// the new flag's value, is left out of the usage (PrintDefaults), and its use is reported (Warnings) so that the
// command can say which name to use instead.
package flagalias

import (
	"flag"
	"fmt"
)

// alias is a deprecated name's value: the value of the flag it stands for.
type alias struct {
	flag.Value
	name string // the flag's current name
}

// IsBoolFlag lets a boolean flag's alias be given without a value, as the flag itself can.
func (a alias) IsBoolFlag() bool {
	b, ok := a.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// Deprecate registers old on fs as a deprecated name of the flag name, which must be registered already.
func Deprecate(fs *flag.FlagSet, old, name string) {
	f := fs.Lookup(name)
	if f == nil {
		panic("flagalias: --" + old + " names --" + name + ", which is not registered")
	}
	fs.Var(alias{f.Value, name}, old, "deprecated: use --"+name)
}

// PrintDefaults prints fs's flags to its output as fs.PrintDefaults does, without the deprecated names.
func PrintDefaults(fs *flag.FlagSet) {
	shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	shown.SetOutput(fs.Output())
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(alias); ok {
			return
		}
		shown.Var(f.Value, f.Name, f.Usage)
		shown.Lookup(f.Name).DefValue = f.DefValue // the default, not what was parsed so far
	})
	shown.PrintDefaults()
}

// Warnings returns one line for each deprecated name given on fs's command line, in the order of the names:
// "--max-tokens is deprecated; use --max-num-batched-tokens".
func Warnings(fs *flag.FlagSet) []string {
	var lines []string
	fs.Visit(func(f *flag.Flag) {
		if a, ok := f.Value.(alias); ok {
			lines = append(lines, fmt.Sprintf("--%s is deprecated; use --%s", f.Name, a.name))
		}
	})
	return lines
}
