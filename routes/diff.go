package routes

import "net/netip"

// Diff returns the routes to add (desired ones no current route satisfies,
// see Route.Matches) and the routes to delete (current ones no desired
// route accounts for). Both keep the order of their input; duplicates in
// desired are added once.
//
// Apply adds before deletes and treat ErrNotFound on delete as success: a
// gateway change shows up as an add of the new route, which Add applies
// by replacing the old one in place, plus a delete of the old route, which
// by then is already gone.
func Diff(desired, current []Route) (add, del []Route) {
	// Indexed by destination: a cluster has thousands of nodes and this
	// runs on every resync.
	cur := byDst(current)
	want := byDst(desired)
	seen := make(map[Route]bool, len(desired))
	for _, d := range desired {
		if seen[d] {
			continue
		}
		seen[d] = true
		if !anyMatch(d, cur[d.Dst]) {
			add = append(add, d)
		}
	}
	for _, c := range current {
		if !anySatisfiedBy(c, want[c.Dst]) {
			del = append(del, c)
		}
	}
	return add, del
}

func byDst(rs []Route) map[netip.Prefix][]Route {
	m := make(map[netip.Prefix][]Route, len(rs))
	for _, r := range rs {
		m[r.Dst] = append(m[r.Dst], r)
	}
	return m
}

func anyMatch(want Route, observed []Route) bool {
	for _, o := range observed {
		if want.Matches(o) {
			return true
		}
	}
	return false
}

func anySatisfiedBy(observed Route, wants []Route) bool {
	for _, w := range wants {
		if w.Matches(observed) {
			return true
		}
	}
	return false
}
