package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/experiments/failover"
)

func init() {
	register(&command{name: "failover", summary: "account for a fleet losing a replica behind HAProxy, with the simulator's prediction beside it", run: runFailover})
}

const failoverHelp = `
Failover accounts for a replica-failure run of a fleet behind HAProxy (tools/loadbench/failover.sh runs one): a
steady load sent with 'morphlab loadtest --outcomes FILE --server-header X-Served-By', one server killed and
started again. It reads the load tester's record, HAProxy's log (server state changes and a line a request in the
log-format experiments/failover.LogFormat, "log stdout format iso") and the run's events (lines "kill T",
"restart T", "up T": Unix times of the kill, the restart and the restarted replica's /health answering), and
accounts for every request: completed, failed with the error the client read (of those, the streams cut on the
killed server, and any other), rejected, and hung (ran into its timeout); the requests HAProxy sent on to another
server; the detection (the kill to HAProxy marking the server down) and the recovery (the restart to its marking
it up, and to the server's first token), and its share of the requests sent after.

It then simulates the same fleet serving the same requests (experiments/deploy.Fleet: --servers replicas of the
deployment the flags describe, --router, one Fault at the kill's time and for as long as it was down) behind a
proxy with HAProxy's rules (detection after --check-inter x --check-fall, serving again the measured start-up
plus --check-inter x --check-rise after the restart, the requests its engine had taken in lost), and writes
failover.md (both, side by side) and the simulation's results under --out, and prints failover.md. It exits 1
when the run missed what it should meet: every request in HAProxy's log once, none hung, no failure but the
streams cut on the killed server, and HAProxy's count of those the same.`

func runFailover(e *env, args []string) error {
	fs := e.flags("--outcomes FILE --haproxy-log FILE --events FILE --servers S1,S2,... --killed S --model M [flags]", failoverHelp)
	var df deploy.Flags
	df.Register(fs, "sim")
	outcomes := fs.String("outcomes", "", "the load tester's record `file` (loadtest --outcomes), one rate")
	logPath := fs.String("haproxy-log", "", "HAProxy's log `file`")
	eventsPath := fs.String("events", "", "the run's events `file`: kill, restart and up times")
	servers := fs.String("servers", "", "HAProxy's `servers`, comma-separated, in the order the simulation numbers its replicas")
	killed := fs.String("killed", "", "the `server` killed")
	router := fs.String("router", "least-outstanding", "the simulated fleet's `router` (least-outstanding is HAProxy's balance leastconn)")
	inter := fs.Duration("check-inter", 2*time.Second, "HAProxy's health-check interval (inter)")
	fall := fs.Int("check-fall", 3, "failed checks that mark a server down (fall)")
	rise := fs.Int("check-rise", 2, "passed checks that mark a server up (rise)")
	out := fs.String("out", "results/failover", "output `directory`")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *outcomes == "" || *logPath == "" || *eventsPath == "" || *servers == "" || *killed == "" {
		return usagef("--outcomes, --haproxy-log, --events, --servers and --killed are required")
	}
	d, err := df.Deployment()
	if err != nil {
		return usagef("%v", err)
	}
	if !slices.Contains(strings.Split(*servers, ","), *killed) {
		return usagef("--killed %q is not one of --servers %s", *killed, *servers)
	}
	if *inter <= 0 || *fall < 1 || *rise < 1 {
		return usagef("--check-inter %v, --check-fall %d, --check-rise %d: want an interval above 0 and counts of 1 or more", *inter, *fall, *rise)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	c, err := failover.Compare(ctx, failover.Run{Outcomes: *outcomes, ProxyLog: *logPath, Events: *eventsPath, Servers: strings.Split(*servers, ","),
		Killed: *killed, Replica: d, Router: *router, CheckInter: *inter, CheckFall: *fall, CheckRise: *rise})
	if err != nil {
		return err
	}
	if err := c.Simulated.Write(filepath.Join(*out, "sim"), nil); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "failover.md"), c.Markdown, 0o644); err != nil {
		return err
	}
	if _, err := e.stdout.Write(c.Markdown); err != nil {
		return err
	}
	if len(c.Missed) > 0 {
		return fmt.Errorf("the run missed: %s", strings.Join(c.Missed, "; "))
	}
	return nil
}
