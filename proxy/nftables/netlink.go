package nftables

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/netnsutil"
)

// Small transactions go straight to nf_tables over netlink. The nft CLI
// reads the whole table (every chain, set and element) into its cache
// before each transaction — 30–50 ms at 10,000 services — and its exit
// (closing its netlink socket) holds up the next commit for 10-15 ms,
// while an element batch over netlink costs well under a millisecond
// whatever the table size. What goes this way: elements of data maps and
// sets (a verdict element would make the kernel re-validate every chain at
// commit), and rewriting the rules of an existing chain when ruleenc.go
// can compile them.

// nfnetlink and nf_tables constants (linux/netfilter/nfnetlink.h,
// linux/netfilter/nf_tables.h).
const (
	nfnlSubsysNFTables = 10
	nfnlMsgBatchBegin  = unix.NLMSG_MIN_TYPE
	nfnlMsgBatchEnd    = unix.NLMSG_MIN_TYPE + 1
	nftMsgNewRule      = 6
	nftMsgGetRule      = 7
	nftMsgDelRule      = 8
	nftMsgNewSetElem   = 12
	nftMsgDelSetElem   = 14

	nftaSetElemListTable    = 1
	nftaSetElemListSet      = 2
	nftaSetElemListElements = 3
	nftaListElem            = 1
	nftaSetElemKey          = 1
	nftaSetElemData         = 2
	nftaDataValue           = 1

	nlaFNested = 0x8000

	// maxBatchBytes stays well under the default netlink socket buffers;
	// bigger changes go through the CLI.
	maxBatchBytes = 128 << 10
)

// errBatchTooBig tells the caller to use the CLI instead.
var errBatchTooBig = errors.New("element batch too big for one netlink message")

// nfproto is the nf_tables family of an nft family keyword.
func nfproto(family string) (uint8, error) {
	switch family {
	case "ip":
		return unix.NFPROTO_IPV4, nil
	case "ip6":
		return unix.NFPROTO_IPV6, nil
	}
	return 0, fmt.Errorf("nftables family %q not supported on the element path", family)
}

// nlBuf builds netlink messages.
type nlBuf struct{ b []byte }

func (n *nlBuf) align() {
	for len(n.b)%4 != 0 {
		n.b = append(n.b, 0)
	}
}

// msg starts a message and returns its offset for end().
func (n *nlBuf) msg(typ, flags uint16, seq uint32, family uint8, resID uint16) int {
	off := len(n.b)
	n.b = binary.NativeEndian.AppendUint32(n.b, 0) // length, patched by end
	n.b = binary.NativeEndian.AppendUint16(n.b, typ)
	n.b = binary.NativeEndian.AppendUint16(n.b, flags)
	n.b = binary.NativeEndian.AppendUint32(n.b, seq)
	n.b = binary.NativeEndian.AppendUint32(n.b, 0) // port id: the kernel's
	n.b = append(n.b, family, 0)                   // nfgenmsg: family, version 0
	n.b = binary.BigEndian.AppendUint16(n.b, resID)
	return off
}

func (n *nlBuf) end(off int) {
	n.align()
	binary.NativeEndian.PutUint32(n.b[off:], uint32(len(n.b)-off))
}

func (n *nlBuf) attr(typ uint16, data []byte) {
	n.b = binary.NativeEndian.AppendUint16(n.b, uint16(4+len(data)))
	n.b = binary.NativeEndian.AppendUint16(n.b, typ)
	n.b = append(n.b, data...)
	n.align()
}

func (n *nlBuf) nest(typ uint16) int {
	off := len(n.b)
	n.b = binary.NativeEndian.AppendUint16(n.b, 0)
	n.b = binary.NativeEndian.AppendUint16(n.b, typ|nlaFNested)
	return off
}

func (n *nlBuf) endNest(off int) {
	binary.NativeEndian.PutUint16(n.b[off:], uint16(len(n.b)-off))
}

func cstring(s string) []byte { return append([]byte(s), 0) }

// encodeBatch renders ops as one nf_tables transaction: begin, one
// acknowledged message per op, end. It returns the batch and the number of
// acknowledgements to wait for.
func encodeBatch(family, table string, ops []Op, seq uint32) ([]byte, int, error) {
	fam, err := nfproto(family)
	if err != nil {
		return nil, 0, err
	}
	var n nlBuf
	n.end(n.msg(nfnlMsgBatchBegin, unix.NLM_F_REQUEST, seq, unix.AF_UNSPEC, nfnlSubsysNFTables))
	for i, op := range ops {
		if err := encodeOp(&n, fam, family, table, op, seq+1+uint32(i)); err != nil {
			return nil, 0, err
		}
		if len(n.b) > maxBatchBytes {
			return nil, 0, errBatchTooBig
		}
	}
	n.end(n.msg(nfnlMsgBatchEnd, unix.NLM_F_REQUEST, seq+1+uint32(len(ops)), unix.AF_UNSPEC, nfnlSubsysNFTables))
	return n.b, len(ops), nil
}

func encodeOp(n *nlBuf, fam uint8, family, table string, op Op, seq uint32) error {
	const ack = unix.NLM_F_REQUEST | unix.NLM_F_ACK
	switch op.Kind {
	case OpFlushChain:
		m := n.msg(nfnlSubsysNFTables<<8|nftMsgDelRule, ack, seq, fam, 0)
		n.attr(nftaRuleTable, cstring(table))
		n.attr(nftaRuleChain, cstring(op.Chain))
		n.end(m)
		return nil
	case OpAddRule:
		m := n.msg(nfnlSubsysNFTables<<8|nftMsgNewRule, ack|unix.NLM_F_CREATE|unix.NLM_F_APPEND, seq, fam, 0)
		n.attr(nftaRuleTable, cstring(table))
		n.attr(nftaRuleChain, cstring(op.Chain))
		if err := encodeRule(n, family, op.Rule); err != nil {
			return fmt.Errorf("%s: %w", op.script(family+" "+table), err)
		}
		n.end(m)
		return nil
	}
	key, err := encodeFields(op.Key, op.Layout.Key)
	if err != nil {
		return fmt.Errorf("element of %s: key %w", op.Set, err)
	}
	var val []byte
	if op.Kind == OpAddElement && len(op.Layout.Value) > 0 {
		if val, err = encodeFields(op.Value, op.Layout.Value); err != nil {
			return fmt.Errorf("element of %s: value %w", op.Set, err)
		}
	}
	typ, flags := uint16(nftMsgNewSetElem), uint16(ack|unix.NLM_F_CREATE)
	if op.Kind == OpDeleteElement {
		typ, flags = nftMsgDelSetElem, ack
	}
	m := n.msg(nfnlSubsysNFTables<<8|typ, flags, seq, fam, 0)
	n.attr(nftaSetElemListTable, cstring(table))
	n.attr(nftaSetElemListSet, cstring(op.Set))
	list := n.nest(nftaSetElemListElements)
	el := n.nest(nftaListElem)
	k := n.nest(nftaSetElemKey)
	n.attr(nftaDataValue, key)
	n.endNest(k)
	if val != nil {
		d := n.nest(nftaSetElemData)
		n.attr(nftaDataValue, val)
		n.endNest(d)
	}
	n.endNest(el)
	n.endNest(list)
	n.end(m)
	return nil
}

// sendBatch runs ops as one transaction in the network namespace at
// netnsPath ("" = this one). A failed element aborts the whole batch; the
// error names the element and carries the kernel's errno.
func sendBatch(netnsPath, family, table string, ops []Op) error {
	return socketFor(netnsPath).transact(family, table, ops)
}

// Sockets are kept open between transactions: closing a netlink socket
// that has committed to nf_tables takes 10-15 ms on this kernel, and the
// next commit in that namespace waits for it. One socket per namespace,
// closed after idleClose without use so a namespace that goes away is not
// pinned for long.
const idleClose = 30 * time.Second

type nlSocket struct {
	netns string
	mu    sync.Mutex
	fd    int    // -1 when closed
	nsID  uint64 // inode of the namespace the socket lives in
	buf   []byte // receive buffer
	seq   uint32
	used  time.Time
	timer *time.Timer
}

var sockets = struct {
	sync.Mutex
	m map[string]*nlSocket
}{m: map[string]*nlSocket{}}

func socketFor(netnsPath string) *nlSocket {
	sockets.Lock()
	defer sockets.Unlock()
	s := sockets.m[netnsPath]
	if s == nil {
		s = &nlSocket{netns: netnsPath, fd: -1, seq: uint32(time.Now().UnixNano())}
		sockets.m[netnsPath] = s
	}
	return s
}

// nsInode identifies the namespace at path (0 for our own).
func nsInode(path string) (uint64, error) {
	if path == "" {
		return 0, nil
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("network namespace %s: %w", path, err)
	}
	return st.Ino, nil
}

// ready makes sure the socket is open and still in the namespace the path
// names now: a namespace deleted and created again under the same name
// must not be programmed through a socket left in the old one.
func (s *nlSocket) ready() error {
	id, err := nsInode(s.netns)
	if err != nil {
		s.close()
		return err
	}
	if s.fd >= 0 && id != s.nsID {
		s.close()
	}
	if s.fd < 0 {
		if err := s.open(); err != nil {
			return err
		}
		s.nsID = id
	}
	return nil
}

func (s *nlSocket) open() error {
	open := func() error {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		if err != nil {
			return err
		}
		s.fd = fd
		return nil
	}
	var err error
	if s.netns != "" {
		err = netnsutil.Do(s.netns, open)
	} else {
		err = open()
	}
	if err != nil {
		return fmt.Errorf("open nfnetlink socket: %w", err)
	}
	tv := unix.NsecToTimeval((5 * time.Second).Nanoseconds())
	if err := unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		s.close()
		return fmt.Errorf("nfnetlink receive timeout: %w", err)
	}
	if err := unix.Bind(s.fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		s.close()
		return fmt.Errorf("bind nfnetlink socket: %w", err)
	}
	return nil
}

// close drops the socket; the (slow) release happens in the background.
func (s *nlSocket) close() {
	if s.fd >= 0 {
		fd := s.fd
		s.fd = -1
		go unix.Close(fd)
	}
}

func (s *nlSocket) closeIfIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.used) >= idleClose {
		s.close()
	}
}

func (s *nlSocket) transact(family, table string, ops []Op) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	seq := s.seq
	s.seq += uint32(len(ops)) + 2
	batch, want, err := encodeBatch(family, table, ops, seq)
	if err != nil {
		return err
	}
	// One acknowledgement per op; the first error wins (the kernel has
	// then aborted the whole transaction). Acknowledgements left over
	// from an earlier, failed batch carry other sequence numbers.
	got := 0
	return s.exchange(batch, func(m syscall.NetlinkMessage) (bool, error) {
		if m.Header.Type != unix.NLMSG_ERROR || m.Header.Seq-seq > uint32(len(ops))+1 {
			return false, nil
		}
		if errno := nlErrno(m); errno != 0 { // an op, or the batch as a whole (EPERM)
			what := "batch"
			if i := int(m.Header.Seq - seq - 1); i >= 0 && i < len(ops) {
				what = ops[i].script(family + " " + table)
			}
			return true, &Error{Stderr: "Error: Could not process rule: " + errnoMessage(errno) + "\n" + what, Err: errno}
		}
		if m.Header.Seq-seq-1 < uint32(len(ops)) {
			got++
		}
		return got == want, nil
	})
}

// exchange sends req and hands every reply message to each until it says
// done. An error of the socket itself closes it (a fresh one is opened
// next time); an error from each is returned as it is.
func (s *nlSocket) exchange(req []byte, each func(syscall.NetlinkMessage) (done bool, err error)) error {
	if err := s.ready(); err != nil {
		return err
	}
	s.used = time.Now()
	if s.timer == nil {
		s.timer = time.AfterFunc(idleClose, s.closeIfIdle)
	} else {
		s.timer.Reset(idleClose)
	}
	if err := unix.Sendto(s.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		s.close()
		return fmt.Errorf("send to nf_tables: %w", err)
	}
	if s.buf == nil {
		s.buf = make([]byte, 64<<10)
	}
	for {
		n, _, err := unix.Recvfrom(s.fd, s.buf, 0)
		if err != nil {
			s.close()
			return fmt.Errorf("read from nf_tables: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(s.buf[:n])
		if err != nil {
			s.close()
			return fmt.Errorf("parse nf_tables reply: %w", err)
		}
		for _, m := range msgs {
			if done, err := each(m); done || err != nil {
				return err
			}
		}
	}
}

// nlErrno is the errno of an NLMSG_ERROR message (0: an acknowledgement).
func nlErrno(m syscall.NetlinkMessage) syscall.Errno {
	if len(m.Data) < 4 {
		return 0
	}
	return syscall.Errno(-int32(binary.NativeEndian.Uint32(m.Data)))
}

// errnoMessage renders e the way nft prints it ("No such file or
// directory"), so IsNotFound and friends work on both paths.
func errnoMessage(e syscall.Errno) string {
	s := e.Error()
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// countRules counts the rules of one chain in the namespace at netnsPath
// with a filtered dump (a missing table or chain counts 0).
func countRules(netnsPath, family, table, chain string) (int, error) {
	return socketFor(netnsPath).countRules(family, table, chain)
}

func (s *nlSocket) countRules(family, table, chain string) (int, error) {
	fam, err := nfproto(family)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seq := s.seq
	s.seq++
	var n nlBuf
	m := n.msg(nfnlSubsysNFTables<<8|nftMsgGetRule, unix.NLM_F_REQUEST|unix.NLM_F_DUMP, seq, fam, 0)
	n.attr(nftaRuleTable, cstring(table))
	n.attr(nftaRuleChain, cstring(chain))
	n.end(m)
	rules := 0
	err = s.exchange(n.b, func(m syscall.NetlinkMessage) (bool, error) {
		if m.Header.Seq != seq {
			return false, nil // left over from an earlier exchange
		}
		switch m.Header.Type {
		case unix.NLMSG_DONE:
			return true, nil
		case unix.NLMSG_ERROR:
			switch errno := nlErrno(m); errno {
			case 0:
				return true, nil
			case unix.ENOENT:
				rules = 0
				return true, nil
			default:
				return true, fmt.Errorf("dump rules of %s %s %s: %w", family, table, chain, errno)
			}
		case nfnlSubsysNFTables<<8 | nftMsgNewRule:
			rules++
		}
		return false, nil
	})
	return rules, err
}
