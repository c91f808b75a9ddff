// Command morphlab is the one command line of the morphlab workbench: it measures the machine (probe), runs and
// summarizes the kernel benchmarks (bench), runs models (generate, perplexity, synth, quantize), profiles layer
// sensitivity (profile), fetches the public data files (data), and, as the project grows, the engine and the
// experiments. Run `morphlab help` for the subcommands this build has and `morphlab <command> -h` for one of them.
//
// Results go to stdout, as tables (Markdown tables drawn by tablewriter through internal/mdtable) or as
// JSON with --json; progress and notes go to stderr, with a progress bar (newProgress,
// newBytesProgress) only when stderr is a terminal. Errors are one line, "morphlab <command>: ...", and the exit
// status is 2 for bad usage (an unknown command, a bad flag or argument) and 1 for a failure.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/morphlab/morphlab/internal/flagalias"
)

// command is one subcommand. Each lives in its own file and adds itself to the table with register in an init
// function, so that a new subcommand touches no other file.
type command struct {
	name    string
	summary string // one line for `morphlab help`
	run     func(e *env, args []string) error
}

var commands = map[string]*command{}

func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("morphlab: command " + c.name + " registered twice")
	}
	commands[c.name] = c
}

// env is what a subcommand writes to. Tests run commands in-process with buffers in place of the real files.
type env struct {
	stdout, stderr io.Writer
	name           string // the subcommand's name, for messages
	usage          func() // prints the subcommand's usage on stdout; set by flags
}

// usageError marks an error that is the caller's: a bad flag, argument or command. It exits with status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// usagef returns a usageError with a formatted message.
func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// errHelp is returned by parse when -h or -help was given: the usage has gone to stdout and the command exits 0.
var errHelp = errors.New("help requested")

// flags returns a flag set for the subcommand whose usage is the synopsis (arguments after the command name)
// and the help paragraph, followed by the flag defaults.
func (e *env) flags(synopsis, help string) *flag.FlagSet {
	fs := flag.NewFlagSet(e.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // a bad flag is reported in one line by run, not with the whole usage
	e.usage = func() {
		fmt.Fprintf(e.stdout, "usage: morphlab %s %s\n\n%s\n\nflags:\n", e.name, synopsis, strings.TrimSpace(help))
		fs.SetOutput(e.stdout)
		flagalias.PrintDefaults(fs) // deprecated names are left out
		fs.SetOutput(io.Discard)
	}
	return fs
}

// parse parses args with a flag set from flags and accepts no positional arguments. -h prints the usage on
// stdout and returns errHelp.
func (e *env) parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			e.usage()
			return errHelp
		}
		return usagef("%v (run 'morphlab %s -h' for usage)", err, e.name)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (run 'morphlab %s -h' for usage)", fs.Arg(0), e.name)
	}
	e.warnDeprecated(fs)
	return nil
}

// warnDeprecated writes a line to stderr for each deprecated flag name (flagalias.Deprecate) given on fs's
// command line, which set the flag of the current name as well.
func (e *env) warnDeprecated(fs *flag.FlagSet) {
	for _, w := range flagalias.Warnings(fs) {
		fmt.Fprintf(e.stderr, "morphlab: %s\n", w)
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command line args (without the program name) and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			usage(stdout)
			return 0
		}
		name, rest = rest[0], []string{"-h"}
	}
	c := commands[name]
	if c == nil {
		fmt.Fprintf(stderr, "morphlab: unknown command %q (commands: %s)\n", name, strings.Join(names(), ", "))
		return 2
	}
	err := c.run(&env{stdout: stdout, stderr: stderr, name: name}, rest)
	var ue usageError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "morphlab %s: %v\n", name, err)
		return 2
	default:
		fmt.Fprintf(stderr, "morphlab %s: %v\n", name, err)
		return 1
	}
}

// names returns the registered subcommands in order.
func names() []string {
	var ns []string
	for n := range commands {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	return ns
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: morphlab <command> [flags]\n\ncommands:\n")
	for _, n := range names() {
		fmt.Fprintf(w, "  %-12s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, "\nRun 'morphlab <command> -h' for a command's flags.\n")
}
