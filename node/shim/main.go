package shim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// Options is one shim command line: a container's shim (Log set), or
// with Exec its second stage, which binds Mounts and execs Argv.
type Options struct {
	Log    string
	Mounts []Mount
	Exec   bool
	Argv   []string
}

// Args is o as the command line that follows the shim's own command
// (shimCommand in package node): the agent writes it, Main reads it.
//
//	[--exec] [--log FILE] [--mounts JSON] -- COMMAND [ARG...]
func (o Options) Args() ([]string, error) {
	var out []string
	if o.Exec {
		out = append(out, "--exec")
	}
	if o.Log != "" {
		out = append(out, "--log", o.Log)
	}
	if len(o.Mounts) > 0 {
		js, err := json.Marshal(o.Mounts)
		if err != nil {
			return nil, fmt.Errorf("shim mounts: %w", err)
		}
		out = append(out, "--mounts", string(js))
	}
	return append(append(out, "--"), o.Argv...), nil
}

// ParseArgs reads what Args writes. It is the agent's private protocol
// with its shim, not a user interface, so it takes exactly that form.
func ParseArgs(args []string) (Options, error) {
	var o Options
	for len(args) > 0 {
		a := args[0]
		switch {
		case a == "--":
			o.Argv = args[1:]
			if len(o.Argv) == 0 {
				return o, errNoCommand
			}
			if !o.Exec && o.Log == "" {
				return o, errors.New("--log is required without --exec")
			}
			return o, nil
		case a == "--exec":
			o.Exec, args = true, args[1:]
		case (a == "--log" || a == "--mounts") && len(args) > 1:
			if a == "--log" {
				o.Log = args[1]
			} else if err := json.Unmarshal([]byte(args[1]), &o.Mounts); err != nil {
				return o, fmt.Errorf("--mounts: %w", err)
			}
			args = args[2:]
		default:
			return o, fmt.Errorf("unexpected argument %q", a)
		}
	}
	return o, errors.New("no -- before the command")
}

// usage is the shim's command line, printed for --help and with an error.
const usage = "usage: [--exec] [--log FILE] [--mounts JSON] -- COMMAND [ARG...]\n" +
	"  runs COMMAND as a pod container: its output as CRI log lines in FILE, or (--exec) exec'd\n" +
	"  after binding the JSON list of mounts in the caller's private mount namespace"

// Main runs the shim's command line, args being what follows self, and
// returns the process's exit code. self is the command line that reaches
// Main again in the running binary ([nodenet-shim] or [nodenet logshim]):
// the shim runs its second stage through it. The second stage binds the
// mounts in the private mount namespace its caller started it in and
// execs the command; the agent also runs CNI plugins through it.
func Main(self, args []string) int {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprintf(os.Stdout, "%s\n", usage)
		return 0
	}
	o, err := ParseArgs(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "logshim: %v\n%s\n", err, usage)
		return 2
	}
	if o.Exec {
		fmt.Fprintf(os.Stderr, "logshim: %v\n", ExecWithMounts(o.Mounts, o.Argv))
		return 127
	}
	return RunLogShim(self, o.Log, o.Mounts, o.Argv)
}

// ExecStage is the command line that runs argv through self's second
// stage with mounts bound; its caller starts it with CLONE_NEWNS.
func ExecStage(self []string, mounts []Mount, argv []string) ([]string, error) {
	if len(self) == 0 {
		return nil, errors.New("exec stage: no shim binary")
	}
	args, err := Options{Exec: true, Mounts: mounts, Argv: argv}.Args()
	if err != nil {
		return nil, err
	}
	return append(append([]string{}, self...), args...), nil
}
