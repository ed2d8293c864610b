package flanneld

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/netnsutil"
)

// TX checksum offload on the vxlan devices.
//
// Why it matters: with offload off, the kernel loses segmentation offload
// on flannel.1 and pushes every MTU-sized packet through the stack on its
// own; vxlan pod-to-pod throughput drops about tenfold (issue 19).
//
// Why anyone turns it off: when the node NATs the outer UDP packet of
// VXLAN traffic while the inner checksum is still pending (offload on,
// CHECKSUM_PARTIAL), the kernel's NAT fixes up the outer UDP checksum the
// wrong way, and the receiving node drops the packet: "UDP: bad checksum.
// From a:port to b:8472" in dmesg, UdpInCsumErrors in /proc/net/snmp,
// "bad udp cksum" in tcpdump; users see ClusterIP/NodePort connections to
// pods on other nodes hang for 63 s (1+2+…+32 s of SYN retries) and DNS
// time out (flannel #1279, #2152, kubernetes #88986). The NAT used to come
// from kube-proxy before 1.19, whose MASQUERADE --random-fully matched the
// outer packet through the 0x4000 mark it inherited from the inner one
// (fixed by unmarking first, kubernetes #92035, which nodenet's proxy also
// does); today it comes from anything else that NATs the node's own UDP
// (a masquerade-everything rule, a NATed public IP). Linux 5.7 (stable
// 5.6.13, 5.4.41, 4.19.123, 4.14.181) fixed one case, "netfilter: nat: never
// update the UDP checksum when it's 0", for devices without outer
// checksums; but flannel.1 gets the kernel's default, which has outer
// checksums on, and the self-test below finds kernel 6.18 still writes a
// wrong one after SNAT. So a version check would be wrong both ways.
// Upstream flanneld leaves offload on and documents turning it off.
//
// auto, the default, therefore asks this kernel and this node:
//
//  1. At start, a self-test builds a VXLAN device exactly as the backend
//     does, with offload on, in a private anonymous network namespace it
//     creates and destroys itself (never the node's own; nothing the
//     node's firewall sees), sends UDP datagrams through it, first plain
//     (a control: the outer checksum must be right) and then with the
//     outer packets SNATed, and checks the outer UDP checksum as it
//     reaches the "wire" with a packet socket. About 30–100 ms, once.
//     A kernel that gets it right keeps offload on for good.
//  2. On a kernel that gets it wrong (or when the self-test cannot run:
//     no CAP_SYS_ADMIN, no nft/iptables, no NAT), offload stays on, since
//     the corruption needs NAT of the outer packets, which neither
//     nodenet's proxy nor flanneld's ip-masq does; every sync then looks
//     in the node's conntrack table for a NATed flow to the VXLAN port
//     and, on the first one, turns offload off for as long as the daemon
//     runs, says why in the log and in the metric. That costs one
//     conntrack dump per sync, and traffic through such a flow is lost
//     until the next sync (at most --resync-period).
//
// What auto cannot see: NIC or hypervisor drivers that corrupt checksums
// of encapsulated packets themselves (reported for some vmxnet3 and X710
// firmware), or NAT done by another box on the path; such nodes need off.

// txCsumDecision is what the daemon decided for its vxlan devices.
type txCsumDecision struct {
	Mode string // configured: auto, on, off
	On   bool
	By   string // config, self-test, self-test-failed, nat-detected
	Why  string
	// Watch: keep looking for NATed VXLAN flows, and turn offload off
	// on the first (the kernel corrupts, or could not be tested).
	Watch bool
}

// decideTxChecksum turns the configured mode into on/off, probing the
// kernel for auto.
func decideTxChecksum(ctx context.Context, mode string, port int, log *slog.Logger) txCsumDecision {
	switch mode {
	case TxChecksumOn:
		return txCsumDecision{Mode: mode, On: true, By: "config", Why: "configured on"}
	case TxChecksumOff:
		return txCsumDecision{Mode: mode, On: false, By: "config", Why: "configured off"}
	}
	start := time.Now()
	res, err := probeNATChecksum(ctx, port)
	log.Debug("vxlan checksum self-test", "took", time.Since(start), "err", err)
	if err != nil {
		return txCsumDecision{Mode: mode, On: true, By: "self-test-failed", Watch: true,
			Why: fmt.Sprintf("self-test could not run (%v); on until a NATed VXLAN flow shows up in conntrack", err)}
	}
	if res.broken {
		return txCsumDecision{Mode: mode, On: true, By: "self-test", Watch: true,
			Why: res.String() + "; on until a NATed VXLAN flow shows up in conntrack"}
	}
	return txCsumDecision{Mode: mode, On: true, By: "self-test", Why: res.String()}
}

// natedVXLANFlow returns a conntrack flow to the VXLAN port whose reply
// tuple is not the mirror of the original, i.e. one the node NATs; "" if
// there is none.
func natedVXLANFlow(ns Netns, port int) (string, error) {
	var flows []*netlink.ConntrackFlow
	err := ns.Do(func() error {
		// The backend's handle speaks rtnetlink only.
		h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
		if err != nil {
			return fmt.Errorf("netfilter netlink socket: %w", err)
		}
		defer h.Close()
		flows, err = h.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("list conntrack in netns %s: %w", ns, err)
	}
	for _, f := range flows {
		o, r := f.Forward, f.Reverse
		if o.Protocol != unix.IPPROTO_UDP || int(o.DstPort) != port {
			continue
		}
		if !o.SrcIP.Equal(r.DstIP) || !o.DstIP.Equal(r.SrcIP) || o.SrcPort != r.DstPort || o.DstPort != r.SrcPort {
			return f.String(), nil
		}
	}
	return "", nil
}

// probeResult is what the self-test saw on the wire.
type probeResult struct {
	broken bool
	sum    uint16 // the outer UDP checksum after NAT; 0 is right
	src    net.IP // outer source address after NAT
}

func (r probeResult) String() string {
	switch {
	case r.broken:
		return fmt.Sprintf("NATed VXLAN packet left with a wrong outer UDP checksum (%#04x): this kernel corrupts checksums with offload on", r.sum)
	case r.sum == 0:
		return "NATed VXLAN packet kept its empty outer UDP checksum: this kernel handles offload correctly"
	}
	return "NATed VXLAN packet has a right outer UDP checksum: this kernel handles offload correctly"
}

// Addresses inside the probe's private namespace; nothing outside it ever
// sees them.
var (
	probeUnderlay = net.IPv4(192, 0, 2, 1)
	probeRemote   = net.IPv4(192, 0, 2, 2)
	probeSNAT     = net.IPv4(192, 0, 2, 3)
	probeInner    = net.IPv4(10, 255, 255, 1)
	probeInnerDst = net.IPv4(10, 255, 255, 2)
)

// probeOffload is the probe device's offload; only tests turn it off, as
// the control that shows offload is what makes the difference.
var probeOffload = true

const (
	probeTable   = "nodenet-vxlan-csum-probe"
	probeSends   = 16
	probeRounds  = 6
	probeTimeout = 2 * time.Second
)

// probeNATChecksum runs the self-test described above: a control round
// without NAT (the checksums must be right, or the probe proves nothing),
// then the same with the outer packets SNATed.
func probeNATChecksum(ctx context.Context, port int) (probeResult, error) {
	var res probeResult
	err := netnsutil.DoPrivate(func() error {
		h, err := netlink.NewHandle()
		if err != nil {
			return fmt.Errorf("netlink in probe namespace: %w", err)
		}
		defer h.Close()
		capture, err := buildProbeTopology(h, port)
		if err != nil {
			return err
		}
		pkt, err := openPacketSocket(capture)
		if err != nil {
			return err
		}
		defer unix.Close(pkt)
		if res, err = sendAndRead(pkt, port, probeUnderlay); err != nil {
			return fmt.Errorf("control round: %w", err)
		}
		if res.broken {
			return fmt.Errorf("control round without NAT already has a bad checksum (%#04x): inconclusive", res.sum)
		}
		if err := probeSNATRule(ctx, port); err != nil {
			return err
		}
		// The corruption does not show in every round: on 6.18 about one
		// round in ten leaves every NATed packet with a right checksum, so
		// one round let the verdict flip between runs. Rounds are cheap
		// (a few ms); one broken round settles it.
		for range probeRounds {
			if res, err = sendAndRead(pkt, port, probeSNAT); err != nil || res.broken {
				break
			}
		}
		return err
	})
	return res, err
}

func sendAndRead(pkt, port int, src net.IP) (probeResult, error) {
	if err := sendProbe(); err != nil {
		return probeResult{}, err
	}
	return readProbe(pkt, port, src, time.Now().Add(probeTimeout))
}

// buildProbeTopology: a veth pair (the "underlay"), a VXLAN device on one
// end made as the backend makes flannel.1 (outer checksums as the kernel
// defaults them), with a static remote and neighbour and offload on as a
// fresh device has it; it returns the index of the far veth end, where the
// packets land. The near end has offload off, so the stack completes the
// inner checksum before the "wire", as a NIC would: what the packet
// socket reads is what a receiving node would verify.
func buildProbeTopology(h *netlink.Handle, port int) (int, error) {
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "csum0"}, PeerName: "csum1"}); err != nil {
		return 0, fmt.Errorf("create probe veth: %w", err)
	}
	under, err := h.LinkByName("csum0")
	if err != nil {
		return 0, fmt.Errorf("find csum0: %w", err)
	}
	far, err := h.LinkByName("csum1")
	if err != nil {
		return 0, fmt.Errorf("find csum1: %w", err)
	}
	vx := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "csumvx", MTU: 1450}, VxlanId: 1, VtepDevIndex: under.Attrs().Index,
		SrcAddr: probeUnderlay, Group: probeRemote, Port: port}
	if err := h.LinkAdd(vx); err != nil {
		return 0, fmt.Errorf("create probe vxlan: %w", err)
	}
	steps := []struct {
		what string
		fn   func() error
	}{
		{"address csum0", func() error { return h.AddrAdd(under, probeAddr(probeUnderlay)) }},
		{"address csumvx", func() error { return h.AddrAdd(vx, probeAddr(probeInner)) }},
		{"set csum0 up", func() error { return h.LinkSetUp(under) }},
		{"set csum1 up", func() error { return h.LinkSetUp(far) }},
		{"set csumvx up", func() error { return h.LinkSetUp(vx) }},
		// Static neighbours: no ARP, so the first datagram goes out.
		{"neighbour on csum0", func() error { return h.NeighSet(probeNeigh(under, probeRemote, far.Attrs().HardwareAddr)) }},
		{"neighbour on csumvx", func() error {
			return h.NeighSet(probeNeigh(vx, probeInnerDst, net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}))
		}},
		{"tx checksum offload", func() error { _, err := txChecksum("", "csumvx", true, probeOffload); return err }},
		{"underlay checksums in software", func() error { _, err := txChecksum("", "csum0", true, false); return err }},
	}
	for _, s := range steps {
		if err := s.fn(); err != nil {
			return 0, fmt.Errorf("probe %s: %w", s.what, err)
		}
	}
	return far.Attrs().Index, nil
}

func probeAddr(ip net.IP) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(24, 32)}}
}

func probeNeigh(l netlink.Link, ip net.IP, mac net.HardwareAddr) *netlink.Neigh {
	return &netlink.Neigh{LinkIndex: l.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT, IP: ip, HardwareAddr: mac}
}

// probeSNATRule NATs the outer VXLAN packets, as kube-proxy's masquerade
// once did; nft first, iptables if there is no nft. The process starts
// from the locked thread, so it runs in the private namespace.
func probeSNATRule(ctx context.Context, port int) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nft := fmt.Sprintf("table ip %s {\n chain post {\n  type nat hook postrouting priority srcnat; policy accept;\n  udp dport %d snat to %s\n }\n}\n",
		probeTable, port, probeSNAT)
	cmd := exec.CommandContext(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(nft)
	out, nerr := cmd.CombinedOutput()
	if nerr == nil {
		return nil
	}
	out2, ierr := exec.CommandContext(ctx, "iptables", "-w", "-t", "nat", "-A", "POSTROUTING", "-p", "udp",
		"--dport", strconv.Itoa(port), "-j", "SNAT", "--to-source", probeSNAT.String()).CombinedOutput()
	if ierr == nil {
		return nil
	}
	return fmt.Errorf("install probe SNAT rule: nft: %w (%s); iptables: %w (%s)", nerr, bytes.TrimSpace(out), ierr, bytes.TrimSpace(out2))
}

func openPacketSocket(ifindex int) (int, error) {
	proto := int(htons(unix.ETH_P_IP))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return -1, fmt.Errorf("probe packet socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind probe packet socket: %w", err)
	}
	return fd, nil
}

// sendProbe sends datagrams through the VXLAN device from ordinary UDP
// sockets: with offload on, their checksum is left pending
// (CHECKSUM_PARTIAL), the condition the bug needs. Each datagram has a
// socket of its own, so each is a new inner flow with its own outer source
// port and its own conntrack entry: the round samples many NATed flows,
// not one.
func sendProbe() error {
	payload := bytes.Repeat([]byte("nodenet vxlan checksum probe "), 8)
	for range probeSends {
		c, err := net.DialUDP("udp4", &net.UDPAddr{IP: probeInner}, &net.UDPAddr{IP: probeInnerDst, Port: 9})
		if err != nil {
			return fmt.Errorf("probe udp socket: %w", err)
		}
		_, err = c.Write(payload)
		c.Close()
		if err != nil {
			return fmt.Errorf("send probe datagram: %w", err)
		}
	}
	return nil
}

// readProbe reads the round's outer VXLAN packets from src (up to
// probeSends) and judges them together: one wrong checksum makes the round
// broken.
func readProbe(fd, port int, src net.IP, deadline time.Time) (probeResult, error) {
	buf := make([]byte, 2048)
	var verdict probeResult
	seen := 0
	for seen < probeSends {
		left := time.Until(deadline)
		if left <= 0 {
			if seen > 0 {
				return verdict, nil // some were lost; judge what arrived
			}
			return probeResult{}, errors.New("no VXLAN packet reached the probe's far end")
		}
		tv := unix.NsecToTimeval(left.Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return probeResult{}, fmt.Errorf("probe socket timeout: %w", err)
		}
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return probeResult{}, fmt.Errorf("read probe packet: %w", err)
		}
		// Packets from another source are the previous round's extras.
		res, ok := judgeOuterPacket(buf[:n], port)
		if !ok || !res.src.Equal(src) {
			continue
		}
		if seen == 0 || (res.broken && !verdict.broken) {
			verdict = res
		}
		seen++
	}
	return verdict, nil
}

// judgeOuterPacket parses an Ethernet frame; ok is false unless it is an
// IPv4/UDP packet to port. Its checksum must be absent (0) or right.
func judgeOuterPacket(frame []byte, port int) (probeResult, bool) {
	const ethLen = 14
	if len(frame) < ethLen+20 || binary.BigEndian.Uint16(frame[12:14]) != unix.ETH_P_IP {
		return probeResult{}, false
	}
	ip := frame[ethLen:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[0]>>4 != 4 || ihl < 20 || ip[9] != unix.IPPROTO_UDP || len(ip) < ihl+8 {
		return probeResult{}, false
	}
	udp := ip[ihl:]
	if int(binary.BigEndian.Uint16(udp[2:4])) != port {
		return probeResult{}, false
	}
	sum := binary.BigEndian.Uint16(udp[6:8])
	ulen := int(binary.BigEndian.Uint16(udp[4:6]))
	res := probeResult{sum: sum, src: net.IP(append([]byte(nil), ip[12:16]...))}
	if sum != 0 {
		res.broken = ulen < 8 || ulen > len(udp) || udpChecksum(ip[12:16], ip[16:20], udp[:ulen]) != 0
	}
	return res, true
}

// udpChecksum is the ones' complement checksum over the IPv4 pseudo-header
// and the UDP datagram, checksum field included: 0 when it is right.
func udpChecksum(src, dst, udp []byte) uint16 {
	var s uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			s += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			s += uint32(b[len(b)-1]) << 8
		}
	}
	add(src)
	add(dst)
	s += unix.IPPROTO_UDP + uint32(len(udp))
	add(udp)
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// txCsumGauge exposes the decision: 1 = offload on, 0 = off, labelled with
// the configured mode and what decided it.
func newTxCsumGauge() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "nodenet", Subsystem: "flanneld", Name: "vxlan_tx_checksum_offload",
		Help: "1 if TX checksum offload is on on the vxlan devices, 0 if turned off; mode is the setting (auto, on, off), decided_by what chose (config, self-test, self-test-failed, nat-detected)."},
		[]string{"mode", "decided_by"})
}
