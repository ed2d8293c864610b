// Package cidrlist parses and checks the CIDR lists nodenet's command lines
// take (--cluster-cidr, --lb-ip-pool, --nodeport-addresses …). One parser
// means every such flag accepts the same syntax — comma-separated,
// repeatable, spaces ignored — and each list obeys one named Rule instead
// of a per-package variant of it.
//
// cmd/ parses flag values with Parse. Libraries receive []netip.Prefix and
// check it with Check, so options built in code (tests, other binaries)
// meet the same rules as options built from flags. Neither function knows
// flag names: the caller adds them to the error.
package cidrlist
