package proxytest

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
)

// Packet is what a data plane's test tracer walks through its Fake: the
// first packet of a new connection.
type Packet struct {
	Src, Dst netip.Addr
	Proto    string // "tcp", "udp" or "sctp"
	Dport    uint16
	Local    bool         // originated on the node (output hook) rather than arriving (prerouting)
	Addrs    []netip.Addr // the node's local addresses
	// Affinity holds the clients already recorded, by the name of the
	// list that holds them (an iptables recent list, an nft set).
	Affinity map[string][]netip.Addr
}

// Outcome is one possible fate of a packet (random load balancing forks).
type Outcome struct {
	Verdict  string // ACCEPT, DROP or REJECT
	DNAT     string // "ip:port", "" when not DNATed
	Masq     bool   // masqueraded
	Affinity string // the list the chosen endpoint recorded the client in
}

func (o Outcome) String() string {
	s := o.Verdict
	if o.DNAT != "" {
		s += " dnat=" + o.DNAT
	}
	if o.Masq {
		s += " masq"
	}
	return s
}

// Summarize renders outcomes as a sorted, de-duplicated list.
func Summarize(outs []Outcome) string {
	var s []string
	for _, o := range outs {
		s = append(s, o.String())
	}
	slices.Sort(s)
	return fmt.Sprint(slices.Compact(s))
}

// Tracer walks a packet through a data plane's programmed Fake.
type Tracer func(t *testing.T, p Packet) []Outcome

// TraceCase is a packet and what a data plane programmed with
// GoldenServices(IPv4) must do with it, as Summarize renders it.
type TraceCase struct {
	Name   string
	Packet Packet
	Want   string
}

// Addresses of the trace cases: the node, a pod on it, a client outside
// the cluster.
var (
	traceNode    = []netip.Addr{v4("192.168.0.2"), v4("127.0.0.1")}
	tracePod     = v4("10.244.0.9")
	traceOutside = v4("172.16.0.1")
)

func v4(s string) netip.Addr { return netip.MustParseAddr(s) }

// GoldenTraces is what every data plane does with packets to
// GoldenServices(IPv4).
func GoldenTraces() []TraceCase {
	node, pod, outside := traceNode, tracePod, traceOutside
	return []TraceCase{
		{"cluster IP from a pod: both endpoints, no masquerade",
			Packet{Src: pod, Dst: v4("10.96.0.10"), Proto: "tcp", Dport: 80},
			"[ACCEPT dnat=10.244.1.2:8080 ACCEPT dnat=10.244.2.2:8080]"},
		{"cluster IP from outside the cluster CIDR: masqueraded",
			Packet{Src: outside, Dst: v4("10.96.0.10"), Proto: "tcp", Dport: 80},
			"[ACCEPT dnat=10.244.1.2:8080 masq ACCEPT dnat=10.244.2.2:8080 masq]"},
		{"cluster IP from the node itself",
			Packet{Src: v4("192.168.0.2"), Dst: v4("10.96.0.10"), Proto: "tcp", Dport: 80, Local: true, Addrs: node},
			"[ACCEPT dnat=10.244.1.2:8080 masq ACCEPT dnat=10.244.2.2:8080 masq]"},
		{"wrong port: untouched",
			Packet{Src: pod, Dst: v4("10.96.0.10"), Proto: "tcp", Dport: 81},
			"[ACCEPT]"},
		{"no endpoints: rejected",
			Packet{Src: pod, Dst: v4("10.96.0.53"), Proto: "udp", Dport: 53},
			"[REJECT]"},
		{"no endpoints, from the node: rejected",
			Packet{Src: v4("192.168.0.2"), Dst: v4("10.96.0.53"), Proto: "udp", Dport: 53, Local: true, Addrs: node},
			"[REJECT]"},
		{"hairpin: endpoint reaching itself is masqueraded",
			Packet{Src: v4("10.244.1.3"), Dst: v4("10.96.0.20"), Proto: "tcp", Dport: 80},
			"[ACCEPT dnat=10.244.1.3:8080 masq]"},
		{"NodePort (eTP Cluster) from outside: masqueraded",
			Packet{Src: outside, Dst: v4("192.168.0.2"), Proto: "tcp", Dport: 30080, Addrs: node},
			"[ACCEPT dnat=10.244.1.3:8080 masq]"},
		{"NodePort eTP Local from outside: local endpoint only, source kept",
			Packet{Src: outside, Dst: v4("192.168.0.2"), Proto: "tcp", Dport: 30443, Addrs: node},
			"[ACCEPT dnat=10.244.0.5:8443]"},
		{"LB IP from an allowed range: local endpoint, source kept",
			Packet{Src: v4("203.0.113.9"), Dst: v4("192.0.2.10"), Proto: "tcp", Dport: 443},
			"[ACCEPT dnat=10.244.0.5:8443]"},
		{"LB IP from outside the source ranges: dropped",
			Packet{Src: outside, Dst: v4("192.0.2.10"), Proto: "tcp", Dport: 443},
			"[DROP]"},
		{"LB IP from a pod outside the source ranges: dropped",
			Packet{Src: pod, Dst: v4("192.0.2.10"), Proto: "tcp", Dport: 443},
			"[DROP]"},
		{"cluster IP of the eTP Local service: every endpoint",
			Packet{Src: pod, Dst: v4("10.96.0.30"), Proto: "tcp", Dport: 443},
			"[ACCEPT dnat=10.244.0.5:8443 ACCEPT dnat=10.244.3.5:8443]"},
		{"external IP without endpoints: rejected",
			Packet{Src: outside, Dst: v4("198.51.100.7"), Proto: "tcp", Dport: 8080},
			"[REJECT]"},
		{"iTP Local: only the local endpoint",
			Packet{Src: pod, Dst: v4("10.96.0.60"), Proto: "tcp", Dport: 80},
			"[ACCEPT dnat=10.244.0.6:80]"},
		{"SCTP",
			Packet{Src: pod, Dst: v4("10.96.0.70"), Proto: "sctp", Dport: 9999},
			"[ACCEPT dnat=10.244.1.7:9999]"},
		{"eTP Local NodePort without local endpoints: rejected",
			Packet{Src: outside, Dst: v4("192.168.0.2"), Proto: "udp", Dport: 30081, Addrs: node},
			"[REJECT]"},
		{"eTP Local NodePort without local endpoints, from a pod: cluster endpoints",
			Packet{Src: pod, Dst: v4("192.168.0.2"), Proto: "udp", Dport: 30081, Addrs: node},
			"[ACCEPT dnat=10.244.5.8:80]"},
		{"eTP Local NodePort without local endpoints, from the node: cluster endpoints",
			Packet{Src: v4("192.168.0.2"), Dst: v4("192.168.0.2"), Proto: "udp", Dport: 30081, Addrs: node, Local: true},
			"[ACCEPT dnat=10.244.5.8:80 masq]"},
	}
}

// CheckTraces runs each case through trace.
func CheckTraces(t *testing.T, trace Tracer, cases []TraceCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			if got := Summarize(trace(t, tc.Packet)); got != tc.Want {
				t.Errorf("got %s, want %s", got, tc.Want)
			}
		})
	}
}

// CheckGoldenTraces runs GoldenTraces through trace, then checks that
// ClientIP affinity sticks once the client is recorded.
func CheckGoldenTraces(t *testing.T, trace Tracer) {
	t.Helper()
	CheckTraces(t, trace, GoldenTraces())
	t.Run("affinity sticks once recorded", func(t *testing.T) {
		pk := Packet{Src: tracePod, Dst: v4("10.96.0.50"), Proto: "tcp", Dport: 80}
		outs := trace(t, pk)
		if got := Summarize(outs); got != "[ACCEPT dnat=10.244.1.9:80 ACCEPT dnat=10.244.2.9:80 ACCEPT dnat=10.244.3.9:80]" {
			t.Fatalf("first packet: %s", got)
		}
		var chosen Outcome
		for _, o := range outs {
			if o.DNAT == "10.244.2.9:80" {
				chosen = o
			}
		}
		if chosen.Affinity == "" {
			t.Fatal("the endpoint did not record the client in an affinity list")
		}
		pk.Affinity = map[string][]netip.Addr{chosen.Affinity: {tracePod}}
		if got := Summarize(trace(t, pk)); got != "[ACCEPT dnat=10.244.2.9:80]" {
			t.Errorf("with affinity recorded: %s", got)
		}
	})
}
