package nftables

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/netnsutil"
	"github.com/nodenet/nodenet/internal/nlmsg"
)

// Small transactions go straight to nf_tables over netlink. The nft CLI
// reads the whole table (every chain, set and element) into its cache
// before each transaction — 30–50 ms at 10,000 services — and its exit
// (closing its netlink socket) holds up the next commit for 10-15 ms,
// while an element batch over netlink costs well under a millisecond
// whatever the table size. What goes this way: elements of data maps and
// sets (a verdict element would make the kernel re-validate every chain at
// commit), and rewriting the rules of an existing chain when ruleenc.go
// can compile them. The messages are framed and exchanged by
// internal/nlmsg; this file knows nf_tables' part of them.

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

	// maxBatchBytes stays well under the default netlink socket buffers;
	// bigger changes go through the CLI.
	maxBatchBytes = 128 << 10

	// receiveTimeout bounds the wait for nf_tables' answers, so a lost
	// one fails a sync (which is retried) instead of stalling the proxy.
	receiveTimeout = 5 * time.Second
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

// begin starts an nfnetlink message: the netlink header and nfgenmsg
// (family, version 0, resource id in network byte order).
func begin(w *nlmsg.Writer, typ, flags uint16, family uint8, resID uint16) {
	w.Begin(typ, flags)
	w.Fixed([]byte{family, 0, byte(resID >> 8), byte(resID)})
}

// nest starts a nested attribute, flagged as nf_tables wants.
func nest(w *nlmsg.Writer, typ uint16) int { return w.Nest(typ | unix.NLA_F_NESTED) }

// encodeBatch renders ops into w as one nf_tables transaction: begin, one
// acknowledged message per op (message i+1 is ops[i]), end.
func encodeBatch(w *nlmsg.Writer, family, table string, ops []Op) error {
	fam, err := nfproto(family)
	if err != nil {
		return err
	}
	begin(w, nfnlMsgBatchBegin, 0, unix.AF_UNSPEC, nfnlSubsysNFTables)
	for _, op := range ops {
		if err := encodeOp(w, fam, family, table, op); err != nil {
			return err
		}
		if w.Len() > maxBatchBytes {
			return errBatchTooBig
		}
	}
	begin(w, nfnlMsgBatchEnd, 0, unix.AF_UNSPEC, nfnlSubsysNFTables)
	return nil
}

func encodeOp(w *nlmsg.Writer, fam uint8, family, table string, op Op) error {
	switch op.Kind {
	case OpFlushChain:
		begin(w, nfnlSubsysNFTables<<8|nftMsgDelRule, unix.NLM_F_ACK, fam, 0)
		w.String(nftaRuleTable, table)
		w.String(nftaRuleChain, op.Chain)
		return nil
	case OpAddRule:
		begin(w, nfnlSubsysNFTables<<8|nftMsgNewRule, unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_APPEND, fam, 0)
		w.String(nftaRuleTable, table)
		w.String(nftaRuleChain, op.Chain)
		if err := encodeRule(w, family, op.Rule); err != nil {
			return fmt.Errorf("%s: %w", op.script(family+" "+table), err)
		}
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
	typ, flags := uint16(nftMsgNewSetElem), uint16(unix.NLM_F_ACK|unix.NLM_F_CREATE)
	if op.Kind == OpDeleteElement {
		typ, flags = nftMsgDelSetElem, unix.NLM_F_ACK
	}
	begin(w, nfnlSubsysNFTables<<8|typ, flags, fam, 0)
	w.String(nftaSetElemListTable, table)
	w.String(nftaSetElemListSet, op.Set)
	list := nest(w, nftaSetElemListElements)
	el := nest(w, nftaListElem)
	k := nest(w, nftaSetElemKey)
	w.Attr(nftaDataValue, key)
	w.EndNest(k)
	if val != nil {
		d := nest(w, nftaSetElemData)
		w.Attr(nftaDataValue, val)
		w.EndNest(d)
	}
	w.EndNest(el)
	w.EndNest(list)
	return nil
}

// sendBatch runs ops as one transaction over r's socket. A failed element
// aborts the whole batch; the error names the element and carries the
// kernel's errno, worded as nft words it.
func (r *ExecRunner) sendBatch(family, table string, ops []Op) error {
	var w nlmsg.Writer
	if err := encodeBatch(&w, family, table, ops); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.socket()
	if err != nil {
		return err
	}
	err = c.Execute(&w, nil)
	var refused *nlmsg.Error
	switch {
	case errors.As(err, &refused): // an op, or the batch as a whole (EPERM)
		what := "batch"
		if i := refused.Index - 1; i >= 0 && i < len(ops) {
			what = ops[i].script(family + " " + table)
		}
		return &Error{Stderr: "Error: Could not process rule: " + errnoMessage(refused.Errno) + "\n" + what, Err: refused.Errno}
	case err != nil:
		r.dropSocket()
		return fmt.Errorf("nf_tables: %w", err)
	}
	return nil
}

// countRules counts the rules of one chain with a filtered dump (a
// missing table or chain counts 0).
func (r *ExecRunner) countRules(family, table, chain string) (int, error) {
	fam, err := nfproto(family)
	if err != nil {
		return 0, err
	}
	var w nlmsg.Writer
	begin(&w, nfnlSubsysNFTables<<8|nftMsgGetRule, unix.NLM_F_DUMP, fam, 0)
	w.String(nftaRuleTable, table)
	w.String(nftaRuleChain, chain)
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.socket()
	if err != nil {
		return 0, err
	}
	rules, err := c.Dump(&w, nfnlSubsysNFTables<<8|nftMsgNewRule)
	var refused *nlmsg.Error
	switch {
	case errors.As(err, &refused) && refused.Errno == unix.ENOENT:
		return 0, nil
	case errors.As(err, &refused), errors.Is(err, nlmsg.ErrDumpInterrupted):
		return 0, fmt.Errorf("dump rules of %s %s %s: %w", family, table, chain, err)
	case err != nil:
		r.dropSocket()
		return 0, fmt.Errorf("dump rules of %s %s %s: %w", family, table, chain, err)
	}
	return len(rules), nil
}

// socket returns r's netlink socket, opening it if need be, and makes sure
// it is in the namespace r.Netns names now: a namespace deleted and
// created again under the same name must not be programmed through a
// socket left in the old one. The caller holds r.mu.
func (r *ExecRunner) socket() (*nlmsg.Conn, error) {
	path := r.netnsPath()
	id, err := nsInode(path)
	if err != nil {
		r.dropSocket()
		return nil, err
	}
	if r.conn != nil && id != r.nsID {
		r.dropSocket()
	}
	if r.conn != nil {
		return r.conn, nil
	}
	var c *nlmsg.Conn
	open := func() (err error) {
		c, err = nlmsg.Dial(unix.NETLINK_NETFILTER)
		return err
	}
	if path != "" {
		err = netnsutil.Do(path, open)
	} else {
		err = open()
	}
	if err != nil {
		return nil, fmt.Errorf("open nfnetlink socket: %w", err)
	}
	if err := c.SetReceiveTimeout(receiveTimeout); err != nil {
		c.Close()
		return nil, err
	}
	r.conn, r.nsID = c, id
	return c, nil
}

// dropSocket lets go of r's socket, after a failure of the socket itself
// or when its namespace went away; a fresh one is opened next time. The
// (slow, see Close) release happens in the background. The caller holds
// r.mu.
func (r *ExecRunner) dropSocket() {
	if c := r.conn; c != nil {
		r.conn = nil
		go c.Close()
	}
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

// errnoMessage renders e the way nft prints it ("No such file or
// directory"), so IsNotFound and friends work on both paths.
func errnoMessage(e unix.Errno) string {
	s := e.Error()
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
