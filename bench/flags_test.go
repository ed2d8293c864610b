package bench

import "flag"

// flagSet reports whether a benchmark flag was given on the command line, so
// a scenario can tell an explicit value from its default.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
